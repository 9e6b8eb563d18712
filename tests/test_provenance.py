"""Provenance that holds: every committed study names a commit of this history and says whether its
tree was clean (or why not, in a note); :func:`gan3d.io.provenance` tells a clean tree from a
changed one and keeps working outside a checkout; and the guard of ``studies/``
(:func:`gan3d.records.check_writable`) refuses a write from a changed tree unless asked, and then
marks the file. Everything here runs real git in temporary repositories."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from gan3d import config, records
from gan3d.convergence import study
from gan3d.exceptions import StudyFileError, UncommittedChanges
from gan3d.io import git_commit, git_state, provenance, repository_of

STUDIES = sorted((ROOT / "studies").glob("*.json"))


@pytest.fixture(autouse=True)
def _own_git(monkeypatch):
    """git run here must see the repository it is pointed at, not one named by the environment."""
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CEILING_DIRECTORIES"):
        monkeypatch.delenv(name, raising=False)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org",
                           "-c", "commit.gpgsign=false", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    """A repository with one committed file (``code.py``), its tree clean."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "code.py").write_text("x = 1\n")
    _git(root, "add", "code.py")
    _git(root, "commit", "-q", "-m", "first")
    return root


# (a) the committed studies ----------------------------------------------------------------------

def _claims(data, where: str = "") -> list[tuple[str, dict]]:
    """Every provenance object in a study file (top level and nested, e.g. network.json's steps)."""
    found = []
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "provenance" and isinstance(value, dict):
                found.append((f"{where}provenance", value))
            else:
                found += _claims(value, f"{where}{key}.")
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found += _claims(value, f"{where}{i}.")
    return found


def _in_history(commit: str) -> bool:
    exists = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT,
                            capture_output=True).returncode == 0
    return exists and subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"],
                                     cwd=ROOT, capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def history():
    if git_state(ROOT).commit is None:
        pytest.skip(f"{ROOT} is not a git checkout: the studies' commits cannot be looked up")
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT,
                             capture_output=True, text=True).stdout.strip()
    if shallow == "true":
        pytest.skip("a shallow clone lacks the older commits the studies name; clone it whole "
                    "(or git fetch --unshallow)")


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.name)
def test_every_committed_study_names_a_commit_of_this_history_and_its_tree_state(path, history):
    data = json.loads(path.read_text())
    claims = _claims(data)
    assert claims and claims[0][0] == "provenance"  # the top level's own, first
    for where, prov in claims:
        commit = prov.get("commit")
        assert isinstance(commit, str) and commit, f"{path.name}: {where} names no commit"
        assert _in_history(commit), f"{path.name}: {where} names {commit}, not in this history"
        note = prov.get("provenance_note")
        assert prov.get("clean") is True or (isinstance(note, str) and note.strip()), \
            f"{path.name}: {where} is not clean: true and has no provenance_note saying why"
    for version, check in data.get("checks", {}).items():  # behavioural checks name commits too
        for side in ("reference", "checkout"):
            commit = check[side]["commit"]
            assert commit is None or _in_history(commit), f"{path.name}: {version} {side} {commit}"


def test_the_rewritten_commit_is_not_in_the_history_and_a_relabelled_file_keeps_what_it_said(history):
    """The lookup above says no to fb14ef3 (recorded by two studies, rewritten before landing)
    and yes to HEAD; a relabelled file keeps the value it recorded beside the real commit."""
    assert not _in_history("fb14ef3aa51fffc5bee8f8246342a0c31cec98ff")
    assert _in_history(git_state(ROOT).commit)
    prov = json.loads((ROOT / "studies" / "algorithms.json").read_text())["provenance"]
    assert prov["clean"] is False and prov["provenance_note"]
    assert prov["commit_as_recorded"] == prov["commit"] + "-dirty"  # the old mark, kept as made


# (b) provenance() ------------------------------------------------------------------------------

def test_provenance_says_clean_then_changed_and_untracked_files_do_not_count(repo):
    head = _git(repo, "rev-parse", "HEAD")
    info = provenance(repo=repo)
    assert (info["commit"], info["clean"], info["source"]) == (head, True, "git checkout")
    (repo / "results").mkdir()
    (repo / "results" / "new.json").write_text("{}")  # untracked: not a change to the code
    assert provenance(repo=repo)["clean"] is True
    (repo / "figures").mkdir()  # the gallery make figures republishes: its output, not code
    (repo / "figures" / "fig.png").write_bytes(b"one")
    _git(repo, "add", "figures/fig.png")
    _git(repo, "commit", "-q", "-m", "a figure")
    head = _git(repo, "rev-parse", "HEAD")
    (repo / "figures" / "fig.png").write_bytes(b"two")
    assert provenance(repo=repo)["clean"] is True
    (repo / "figures.py").write_text("y = 1\n")  # a file whose name only starts so counts
    _git(repo, "add", "figures.py")
    assert provenance(repo=repo)["clean"] is False
    _git(repo, "reset", "-q", "figures.py")
    (repo / "code.py").write_text("x = 2\n")  # a tracked file changed
    info = provenance(repo=repo)
    assert (info["commit"], info["clean"]) == (head, False)  # the commit alone, no -dirty
    _git(repo, "add", "code.py")  # staged but not committed is still a change
    assert provenance(repo=repo)["clean"] is False
    _git(repo, "commit", "-q", "-m", "second")
    assert provenance(repo=repo)["clean"] is True and git_commit(repo) != head


def test_provenance_outside_a_checkout_has_no_commit_and_says_why(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    if repository_of(folder) is not None:
        pytest.skip(f"{tmp_path} lies inside a git repository")
    info = provenance({"step": 1}, repo=folder)
    assert (info["commit"], info["clean"], info["source"]) == (None, None, "not a git checkout")
    assert info["step"] == 1 and info["gan3d"]


def test_this_checkout_is_described_by_its_own_head():
    state = git_state()
    if state.commit is None:
        pytest.skip(f"gan3d runs from outside a git checkout ({state.source})")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    assert state.commit == head == provenance()["commit"]
    assert isinstance(state.clean, bool) and state.source == "git checkout"


def _run_copy(site: Path, code: str) -> dict:
    """What ``code`` prints (JSON) when run with a copy of the package installed in ``site``."""
    if not (site / "gan3d").is_dir():
        shutil.copytree(ROOT / "src" / "gan3d", site / "gan3d",
                        ignore=shutil.ignore_patterns("__pycache__"))
    code = f"import json, gan3d.io as io\n{code}\nprint(json.dumps({{**out, 'file': io.__file__}}))"
    env = {"PYTHONPATH": str(site), "PATH": str(Path(shutil.which("git")).parent)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert Path(out.pop("file")).is_relative_to(site)  # the copy ran, not this checkout
    return out


STATE = "out = io.git_state()._asdict()"


def test_an_installed_copy_names_no_commit_even_inside_another_repository(repo, tmp_path):
    """A wheel: outside any repository, and in a virtual environment that lies in a repository
    which does not track it (that repository's commit is not the package's)."""
    alone = tmp_path / "site"
    if repository_of(tmp_path) is None:
        assert _run_copy(alone, STATE) == {"commit": None, "clean": None,
                                           "source": "not a git checkout"}
    inside = _run_copy(repo / "venv" / "site-packages", STATE)
    assert inside["commit"] is None and inside["source"].startswith("not a git checkout")


def test_an_installed_copy_may_not_write_into_a_clean_studies_folder(repo, tmp_path):
    """Its provenance would name no commit: refused unless asked, even where the tree is clean."""
    guard = ("from gan3d import records\nfrom gan3d.exceptions import UncommittedChanges\n"
             "try:\n    records.check_writable(%r)\n    out = {'refused': ''}\n"
             "except UncommittedChanges as exc:\n    out = {'refused': str(exc)}\n"
             "out['allowed'] = records.check_writable(%r, allow_dirty=True)")
    target = str(repo / "studies" / "x.json")
    out = _run_copy(tmp_path / "site", guard % (target, target))
    assert "the gan3d writing it names no clean commit (not a git checkout" in out["refused"]
    assert out["allowed"] is False  # the tree itself is clean: nothing to mark false


# (c) the guard of studies/ ---------------------------------------------------------------------

def test_a_study_file_is_refused_from_a_changed_tree_and_allowed_when_asked_marked(repo):
    target = repo / "studies" / "new" / "x.json"  # its folders need not exist yet
    body = records.record("inference", {"rows": [1]}, provenance={"gan3d": "t", "clean": True})
    (repo / "code.py").write_text("x = 2\n")
    with pytest.raises(UncommittedChanges, match=r"commit first, or pass --allow-dirty \(the "
                                                 r"file is then marked clean: false\)"):
        records.write(target, dict(body))
    assert not target.exists()
    assert issubclass(UncommittedChanges, StudyFileError)
    records.write(target, dict(body, provenance=dict(body["provenance"])), allow_dirty=True)
    saved = json.loads(target.read_text())
    assert saved["provenance"]["clean"] is False and saved["rows"] == [1]
    # results/ and any folder outside studies/ are free, and nothing is marked there
    free = records.write(repo / "results" / "x.json", dict(body, provenance={"clean": True}))
    assert json.loads(free.read_text())["provenance"]["clean"] is True
    assert records.check_writable(repo / "studies_old" / "x.json") is False


def test_a_clean_tree_writes_studies_and_its_new_untracked_files_do_not_block_the_next(repo):
    own = git_state()
    target = repo / "studies" / "x.json"
    if own.commit is None:  # a gan3d that is no checkout could not name its code: refused
        with pytest.raises(UncommittedChanges, match="the gan3d writing it names no clean commit"):
            records.check_writable(target)
        return
    assert records.check_writable(target) is False  # nothing to mark
    records.write(target, records.record("inference", {"rows": []},
                                         provenance=provenance(repo=repo)))
    assert json.loads(target.read_text())["provenance"]["clean"] is True
    records.write(target, records.record("inference", {"rows": [2]},
                                         provenance=provenance(repo=repo)))  # x.json untracked
    assert json.loads(target.read_text())["rows"] == [2]


def test_a_committed_study_file_may_be_rewritten_by_its_study_but_another_change_refuses(repo):
    """A resumable study rewrites its own committed file after every run: that file's changes
    are its output and leave the tree clean; a change to any other tracked file does not."""
    target = repo / "studies" / "x.json"
    other = repo / "studies" / "y.json"
    body = lambda rows: records.record("inference", {"rows": rows},  # noqa: E731
                                       provenance=provenance(repo=repo, exclude=(target,)))
    records.write(target, body([1]))
    other.write_text("{}\n")
    _git(repo, "add", "studies")
    _git(repo, "commit", "-q", "-m", "the study so far")
    records.write(target, body([1, 2]))  # the first run's write of this session
    assert git_state(repo).clean is False  # the file did change...
    assert git_state(repo, exclude=(target,)).clean is True  # ...and nothing else
    records.write(target, body([1, 2, 3]))  # the second: refused before this change
    saved = json.loads(target.read_text())
    assert saved["rows"] == [1, 2, 3] and saved["provenance"]["clean"] is True
    other.write_text('{"edited": true}\n')  # another study file changed by hand
    with pytest.raises(UncommittedChanges, match="commit first"):
        records.write(target, body([4]))
    assert json.loads(target.read_text())["rows"] == [1, 2, 3]
    # a path outside the repository excludes nothing and breaks nothing
    assert git_state(repo, exclude=(repo.parent / "elsewhere.json",)).clean is False


def _tripwire(*args, **kwargs):
    raise AssertionError("the guard let a write into studies/ from a changed tree through")


def test_the_same_refusal_guards_the_study_the_benchmarks_and_a_behavioural_check(
        repo, tmp_path, monkeypatch):
    """Refused before the work: the first step of that work is a tripwire here, so that a guard
    that lets the write through fails at once instead of training or timing for minutes."""
    import gan3d.data.generate
    from gan3d.convergence import analysis

    (repo / "code.py").write_text("x = 2\n")
    out = repo / "studies" / "convergence.json"
    cfg = config.resolve("quick", {"study.output": str(out), "study.workdir": str(tmp_path / "w")})
    for owner, name in ((gan3d.data.generate, "generate_dataset"), (study, "_launch_group"),
                        (analysis, "measure_communication")):
        monkeypatch.setattr(owner, name, _tripwire)
    with pytest.raises(UncommittedChanges, match="convergence.json goes into studies/"):
        study.run_study(cfg)
    assert not (tmp_path / "w").exists() and not out.exists()
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # as when run: its folder is on the path
    spec = importlib.util.spec_from_file_location("bench_inference",
                                                  ROOT / "bench" / "bench_inference.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(bench.runtime, "apply_process_defaults", _tripwire)  # its first step
    with pytest.raises(UncommittedChanges, match="commit first, or pass --allow-dirty"):
        bench.main(["--out", str(repo / "studies" / "inference.json")])
    with pytest.raises(UncommittedChanges, match=r"the check is then marked clean: false"):
        records.require_clean(repo=repo, what="this checkout", marked="the check")
    assert records.require_clean(True, repo=repo).clean is False  # asked for: allowed, and said


@pytest.mark.parametrize("path", sorted((ROOT / "bench").glob("[!_]*.py")), ids=lambda p: p.name)
def test_every_benchmark_takes_allow_dirty_and_checks_its_output_first(path):
    text = path.read_text()
    takes = '"--allow-dirty"' in text or "_output.add_options(" in text  # bench/_output.py's
    assert takes and "records.check_writable(" in text
