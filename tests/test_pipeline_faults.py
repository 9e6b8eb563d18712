"""Faults of the figure pipeline and of ``gan3d simulate``, each made real: a damaged state file,
two runs on one results folder, Ctrl-C and SIGKILL inside a notebook, energies outside those a
generator was trained on, and messages that must print plain numbers.

The pipeline runs on tiny stand-in notebooks with the real names (as in ``test_pipeline.py``),
in real processes that get real signals; the lock is held by a real second process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest

from gan3d.exceptions import DataValueError, OutsideTrainedRange, PipelineBusy
from gan3d.report.pipeline import LOCK, STEPS, read_state, reproduce

DATA_NB = STEPS[0].notebook  # the first notebook: the one the signals interrupt

# A stand-in notebook: stages a "figure" that differs on every run (so a test can tell which run
# published it) with its data, says which kernel process runs it, then waits while the results
# folder holds a file "hold" (the same notebook, so the same key, either way).
BODY = """
import os, pathlib, time
staging, results = pathlib.Path(figures_dir), pathlib.Path(results_dir)
(staging / "data").mkdir(parents=True, exist_ok=True)
results.mkdir(parents=True, exist_ok=True)
(staging / "NAME.png").write_text(f"made at {time.time_ns()}")
(staging / "data" / "NAME.json").write_text("{}")
(results / "kernel.pid").write_text(str(os.getpid()))
while (results / "hold").exists():
    time.sleep(0.05)
"""

# The real `gan3d reproduce` (its command-line entry, exit status and messages) on the project's
# stand-in notebooks: only the three folders differ from a user's run.
DRIVER = """
import sys
from pathlib import Path
from gan3d import cli
from gan3d.report import pipeline
root, real = Path(sys.argv[1]), pipeline.reproduce
pipeline.reproduce = lambda *a, **k: real(*a, notebooks_dir=root / "notebooks",
    results_dir=root / "results", figures_dir=root / "figures", verbose=False, **k)
sys.exit(cli.main(["reproduce", *sys.argv[2:]]))
"""

# A second process that holds the pipeline's lock of a results folder until its stdin closes.
HOLDER = """
import sys
from gan3d.report.pipeline import run_lock
with run_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def project(tmp_path):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    for step in STEPS:
        nb = nbformat.v4.new_notebook()
        params = nbformat.v4.new_code_cell('profile = "quick"\noverrides = {}\n'
                                           'figures_dir = "f"\nresults_dir = "r"')
        params.metadata["tags"] = ["parameters"]
        nb.cells = [params, nbformat.v4.new_code_cell(BODY.replace("NAME", f"{step.name}_fig"))]
        nb.metadata["kernelspec"] = {"name": "gan3d", "language": "python", "display_name": "gan3d"}
        nbformat.write(nb, nbs / step.notebook)
    return tmp_path


def _run(project, **kwargs):
    return reproduce("quick", {}, notebooks_dir=project / "notebooks",
                     results_dir=project / "results", figures_dir=project / "figures",
                     verbose=False, **kwargs)


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones included: a temporary file would be one)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture
def logged():
    """What the package logs during the test, one string (whether or not it also propagates to
    pytest's handlers, which depends on what configured logging first)."""
    messages: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())
    logging.getLogger("gan3d").addHandler(handler)
    yield lambda: "\n".join(messages)
    logging.getLogger("gan3d").removeHandler(handler)


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


# ---------------------------------------------------------------------------------------------
# 1. A damaged state.json: a cache, rebuilt


VALID = {"key": "k", "figures": ["a.png"], "parameters": {}, "finished_utc": "t", "code": "c"}


@pytest.mark.parametrize("content, kept", [
    (b'{"01_data_exploration.ipynb": {"key": "ab', set()),   # cut off mid-write
    (b"\xff\xfe\x00garbage", set()),                          # not even UTF-8
    (b"", set()),                                              # empty
    (b"[1, 2]", set()),                                        # JSON, not the state's shape
    (json.dumps({"a.ipynb": VALID, "b.ipynb": "x", "c.ipynb": {**VALID, "figures": "a.png"},
                 "d.ipynb": {**VALID, "code": 3}}).encode(), {"a.ipynb"}),  # damaged entries
], ids=["cut-off", "not-utf8", "empty", "a-list", "bad-entries"])
def test_a_damaged_state_file_is_taken_as_absent_naming_it(tmp_path, logged, content, kept):
    path = tmp_path / "state.json"
    path.write_bytes(content)
    assert set(read_state(path)) == kept
    err = logged()
    assert str(path) in err and ("damaged" in err or "not the pipeline's state" in err)
    if kept:
        assert "b.ipynb, c.ipynb, d.ipynb" in err and "a.ipynb" not in err.split("entries of")[1]


def test_an_intact_state_file_is_read_without_a_word(tmp_path, logged):
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"a.ipynb": VALID}))
    assert read_state(path) == {"a.ipynb": VALID} and read_state(tmp_path / "none.json") == {}
    assert logged() == ""


@pytest.mark.slow
@pytest.mark.notebook
def test_reproduce_redoes_what_a_damaged_state_file_no_longer_says(project, logged):
    assert [r.status for r in _run(project, only=["concepts"]).records] == ["ran"]
    state = project / "results" / "pipeline" / "state.json"
    state.write_text(state.read_text()[:40])  # a state file cut off
    summary = _run(project, only=["concepts"])
    assert [r.status for r in summary.records] == ["ran"]  # redone, not a JSONDecodeError
    assert f"{state} is damaged" in logged()
    rebuilt = read_state(state)  # whole again, recording the notebook it redid
    assert rebuilt[STEPS[4].notebook]["key"] == summary.records[0].key


# ---------------------------------------------------------------------------------------------
# 2. Two runs on one results folder


@pytest.mark.parametrize("ending", ["ends", "SIGKILL"])
def test_a_second_run_is_refused_at_once_naming_the_first(tmp_path, ending):
    results = tmp_path / "results"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(results)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        t0 = time.monotonic()
        with pytest.raises(PipelineBusy) as err:
            reproduce("quick", {}, notebooks_dir=tmp_path / "none", results_dir=results,
                      figures_dir=tmp_path / "figures", verbose=False)
        assert time.monotonic() - t0 < 30  # refused, not waiting for the holder (it never lets go)
        text = str(err.value)
        assert f"pid {holder.pid} on host {platform.node()}, started 20" in text
        assert str(results / "pipeline" / LOCK) in text and "delete" in text
        # the command says it in one line, exit status 2 (the lock is taken before any notebook)
        cli = subprocess.run([sys.executable, "-m", "gan3d", "reproduce", "--set",
                              f"pipeline.results={results}", "--set",
                              f"pipeline.figures={tmp_path / 'figures'}"],
                             capture_output=True, text=True, timeout=300)
        assert cli.returncode == 2 and "Traceback" not in cli.stderr
        assert f"pid {holder.pid}" in cli.stderr and len(cli.stderr.strip().splitlines()) == 1
    finally:
        if ending == "ends":
            holder.stdin.close()
        else:  # the lock file stays behind, naming the dead holder: it must not block
            holder.kill()
        holder.wait(timeout=60)
        holder.stdin.close()
        holder.stdout.close()
    if ending == "SIGKILL":
        assert f'"pid": {holder.pid}' in (results / "pipeline" / LOCK).read_text()
    else:  # an ended run leaves no name behind that a later refusal could give
        assert (results / "pipeline" / LOCK).read_text() == ""
    for _ in range(2):  # the lock is free now, and released by a run when it returns
        summary = reproduce("quick", {}, notebooks_dir=tmp_path / "none", results_dir=results,
                            figures_dir=tmp_path / "figures", verbose=False, only=["data"])
        # it ran: past the lock, to the notebook (which this test did not write)
        assert [r.status for r in summary.records] == ["failed"]
        assert "does not exist" in summary.records[0].error


# ---------------------------------------------------------------------------------------------
# 3. Ctrl-C or SIGKILL inside a notebook


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_a_run_ended_inside_a_notebook_publishes_nothing_and_is_redone(project, sig):
    results, figures = project / "results", project / "figures"
    assert [r.status for r in _run(project, only=["data"]).records] == ["ran"]
    before = _snapshot(figures)
    assert "data_fig.png" in before and "data/data_fig.json" in before
    # the same notebook again (--force: its key is unchanged, so only the state can tell that
    # this run did not finish), held inside its cell until the signal comes
    (results / "data" / "kernel.pid").unlink()
    (results / "data" / "hold").write_text("")
    run = subprocess.Popen([sys.executable, "-c", DRIVER, str(project), "--only", "data",
                            "--force"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)  # its own process group, as a terminal's job
    kernel = None
    try:
        deadline = time.monotonic() + 240
        while not (results / "data" / "kernel.pid").is_file():
            if run.poll() is not None:
                pytest.fail(f"the run ended before its notebook started: {run.communicate()}")
            if time.monotonic() > deadline:
                pytest.fail("the notebook did not start within 240 s")
            time.sleep(0.1)
        time.sleep(0.5)
        kernel = int((results / "data" / "kernel.pid").read_text())
        os.killpg(run.pid, sig)  # Ctrl-C in a terminal signals the whole foreground group
        _, err = run.communicate(timeout=120)
    finally:
        (results / "data" / "hold").unlink(missing_ok=True)
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        run.stdout.close()
        run.stderr.close()
    assert (results / "data" / "figures_staging" / "data_fig.png").is_file()  # it had made one
    assert _snapshot(figures) == before  # not one file of figures/ changed, added or half-written
    assert DATA_NB not in read_state(results / "pipeline" / "state.json")
    if sig == signal.SIGINT:
        # one line from the package and no traceback at all: the kernel, shut down while it
        # answers, may log a ZMQError of ipykernel's; that goes to the kernel's log beside the
        # executed notebook, not to the terminal
        assert run.returncode == 130
        assert err.strip().splitlines()[-1] == "gan3d reproduce: interrupted"
        assert "Traceback" not in err and "ZMQError" not in err and "IPKernelApp" not in err
        assert (results / "notebooks" / DATA_NB).with_suffix(".kernel.log").is_file()
        assert f"{DATA_NB} interrupted" in err and "the next run redoes it" in err
        assert _gone(kernel, 30)  # the notebook's kernel was shut down with the run
    else:
        assert run.returncode == -signal.SIGKILL
    # the next run redoes the notebook: neither the dead run's lock file nor a kernel that
    # outlived a SIGKILLed run (it does not inherit the lock) blocks it
    try:
        again = _run(project, only=["data"])
    finally:
        # an orphaned kernel ends on its own once it sees its parent gone: it may do so between
        # the look and the kill
        if not _gone(kernel, 0.1):
            with contextlib.suppress(ProcessLookupError):
                os.kill(kernel, signal.SIGKILL)
    assert [r.status for r in again.records] == ["ran"]
    assert _snapshot(figures)["data_fig.png"] != before["data_fig.png"]
    assert DATA_NB in read_state(results / "pipeline" / "state.json")


def test_the_cell_task_left_by_ctrl_c_does_not_speak_after_the_last_line(caplog):
    """nbclient's cell task, left pending by Ctrl-C, ends with 'Kernel died' once the kernel is
    shut down; asyncio reports it when collected (at exit: after 'gan3d reproduce: interrupted',
    seen on a loaded machine). After the interrupt that death is not reported; any other
    unretrieved exception still is."""
    import asyncio
    import gc

    from jupyter_core.utils import ensure_event_loop
    from nbclient.exceptions import DeadKernelError

    from gan3d.report.execute import quiet_dead_kernel_tasks

    async def cell():
        raise DeadKernelError("Kernel died")

    async def other():
        raise ValueError("not the kernel")

    loop = ensure_event_loop()
    previous = loop.get_exception_handler()
    try:
        quiet_dead_kernel_tasks()
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            for coro in (cell, other):
                task = loop.create_task(coro())
                loop.run_until_complete(asyncio.wait([task]))  # done; its exception not taken
                del task
                gc.collect()  # collected: asyncio reports an exception nobody retrieved
    finally:
        loop.set_exception_handler(previous)
    reported = [r.exc_info[1] for r in caplog.records if r.name == "asyncio" and r.exc_info]
    assert [type(e) for e in reported] == [ValueError], reported


@pytest.mark.notebook
@pytest.mark.parametrize("interrupted", [False, True], ids=["on-its-own", "after-ctrl-c"])
def test_a_kernel_that_dies_fails_its_notebook_by_name_or_is_the_interrupt(project, interrupted):
    """A kernel killed from outside (here: by its own cell) is a named failure, not nbclient's
    traceback; after Ctrl-C (which signals the kernel too) its death is the interrupt."""
    from gan3d.report import pipeline

    nb = nbformat.read(project / "notebooks" / DATA_NB, as_version=4)
    nb.cells[1].source = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"
    nbformat.write(nb, project / "notebooks" / DATA_NB)
    if interrupted:
        pipeline.RUNNING["interrupted"] = True
    try:
        if interrupted:
            with pytest.raises(KeyboardInterrupt):
                _run(project, only=["data"])
        else:
            rec = _run(project, only=["data"]).records[0]
            assert rec.status == "failed", rec
            assert f"{DATA_NB} failed as its kernel died" in rec.error
            assert "partly executed notebook is kept at" in rec.error
    finally:
        pipeline.RUNNING.pop("interrupted", None)
    assert DATA_NB not in read_state(project / "results" / "pipeline" / "state.json")
    assert not (project / "figures" / "data_fig.png").exists()


# ---------------------------------------------------------------------------------------------
# 4. Energies outside those a generator was trained on


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    """An (untrained) generator whose run's record says it was trained on 20-100 GeV."""
    from gan3d.gan import model

    folder = tmp_path_factory.mktemp("train_1w")
    model.save_generator(model.build_generator(), folder / "generator.keras")
    (folder / "config.json").write_text(json.dumps(
        {"config": {"data": {"energy_min": 20.0, "energy_max": 100.0}}}))
    return folder


def test_the_trained_range_is_the_generators_own_record(tmp_path):
    from gan3d.gan import reference, simulate

    run = tmp_path / "run"
    run.mkdir()
    (run / "generator.keras").write_bytes(b"")
    assert simulate.trained_energies(run / "generator.keras")[2].startswith("no record")
    assert simulate.trained_energies(run / "generator.keras")[:2] == (10.0, 500.0)  # defaults
    (run / "config.json").write_text(json.dumps(
        {"config": {"data": {"energy_min": 20.0, "energy_max": 100.0}}}))
    assert simulate.trained_energies(run / "generator.keras") == (20.0, 100.0,
                                                                  str(run / "config.json"))
    # wider data than the fakes training draws (10-500 GeV): the generator learned only those
    (run / "config.json").write_text(json.dumps(
        {"config": {"data": {"energy_min": 1.0, "energy_max": 1000.0}}}))
    assert simulate.trained_energies(run / "generator.keras")[:2] == (10.0, 500.0)
    (run / "config.json").write_text('{"config": {"da')
    assert "is damaged" in simulate.trained_energies(run / "generator.keras")[2]
    for partial in ('{"config": {"train": {}}}', '{"config": {"data": {"energy_min": null}}}'):
        (run / "config.json").write_text(partial)
        assert simulate.trained_energies(run / "generator.keras") == (
            10.0, 500.0, f"{run / 'config.json'} names no data range: the default "
                         "data.energy_min-energy_max, 10-500 GeV")
    ref = reference.info()["config"]["data"]
    lo, hi, where = simulate.trained_energies(simulate._generator_file("reference"))
    assert (lo, hi) == (ref["energy_min"], ref["energy_max"]) and where.endswith("reference.json")


def test_energies_outside_the_trained_ones_warn_and_strict_refuses(tmp_path, generator, logged):
    from gan3d.gan import simulate

    out = simulate.simulate(generator, 4, tmp_path / "in.h5", energies="20:100", batch=4,
                            precision="float32", progress=False)
    assert out["n"] == 4 and logged() == ""  # inside: not a word
    simulate.simulate(generator, 4, tmp_path / "out.h5", energies="50,150.5", batch=4,
                      precision="float32", progress=False)
    err = logged()
    assert (f"--energies 50,150.5: 50-150.5 GeV reaches outside the 20-100 GeV the generator "
            f"{generator / 'generator.keras'} was trained on ({generator / 'config.json'})") in err
    assert (tmp_path / "out.h5").is_file()  # simulated all the same
    with pytest.raises(OutsideTrainedRange, match="20-100 GeV") as refused:
        simulate.simulate(generator, 4, tmp_path / "strict.h5", energies="10:100", batch=4,
                          precision="float32", progress=False, strict=True)
    assert "np." not in str(refused.value) and not (tmp_path / "strict.h5").exists()


def test_the_command_refuses_with_strict_in_one_line(tmp_path, generator):
    cmd = [sys.executable, "-m", "gan3d", "simulate", "--generator", str(generator), "--n", "2",
           "--energies", "1000:2000", "--output", str(tmp_path / "x.h5"), "--strict"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "1000-2000 GeV reaches outside the 20-100 GeV" in res.stderr and "--strict" in res.stderr
    assert not (tmp_path / "x.h5").exists()


# ---------------------------------------------------------------------------------------------
# 5. Plain numbers in messages


def test_an_energy_out_of_range_is_printed_as_a_plain_number(tmp_path):
    """The report: `primary energy np.float32(6188.7207) GeV` (the repr of a NumPy scalar)."""
    from conftest import fixed_file, random_showers

    from gan3d.data import files

    ecal, energy = random_showers(4)
    energy[2] = np.float32(6188.7207)
    path = fixed_file(tmp_path / "e.h5", ecal, energy)
    with pytest.raises(DataValueError) as err:
        files.read_showers(path)
    assert "primary energy 6188.72 GeV of shower 2 is outside [0.1, 1000] GeV" in str(err.value)
    problems = files.check_folder(tmp_path).problems
    assert len(problems) == 1 and "6188.72 GeV" in problems[0]
    assert "np." not in str(err.value) + problems[0]


# A command whose unwinding hangs after Ctrl-C (a kernel or MPI job that does not answer): it
# swallows every KeyboardInterrupt - also one that lands between printing the child's pid and
# the loop, where an uncaught one would end Python by SIGINT (-2) before the timer could act -
# and has a child that would outlive it.
HANGS = """
import subprocess, sys, time
from gan3d import cli


def hang():
    while True:
        try:
            time.sleep(600)
        except KeyboardInterrupt:
            pass


cli._bounded_interrupt("reproduce", {"notebook": "02_distributed_training.ipynb"}, grace=2.0)
child = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                          "signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)"])
try:
    print(child.pid, flush=True)
    hang()
except KeyboardInterrupt:
    hang()
"""


def test_ctrl_c_ends_the_command_even_when_its_unwinding_hangs():
    run = subprocess.Popen([sys.executable, "-c", HANGS], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        child = int(run.stdout.readline())
        os.killpg(run.pid, signal.SIGINT)
        _, err = run.communicate(timeout=120)  # the grace is 2 s: ended by the timer
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        run.stdout.close()
        run.stderr.close()
    assert run.returncode == 130
    assert err.strip().splitlines()[-1] == "gan3d reproduce: interrupted"
    assert "02_distributed_training.ipynb interrupted" in err and "were killed" in err
    assert _gone(child, 10)  # its child did not outlive it
