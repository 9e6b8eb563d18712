"""``gan3d doctor``: every check gives a typed finding where it is made, and the problems are the
findings that are not ok - each with the fix for this kind of environment (the checkout's .venv
or a site's), one per component."""

from __future__ import annotations

import pytest

from gan3d import doctor
from gan3d.doctor import FIX_ENV, Finding


@pytest.mark.slow
def test_doctor_reports_no_problem():
    info, problems = doctor.collect()
    assert problems == []
    assert info["horovod"]["mpi"] and info["horovod"]["gloo"]
    # mpi4py and Horovod must use one and the same libmpi
    assert info["libmpi loaded"].ok and info["libmpi loaded"].detail.count("libmpi") == 1


def test_a_missing_dependency_is_one_finding_with_its_pip_command(monkeypatch):
    """gan3d installed with --no-deps into another environment: each declared dependency that is
    missing or too old is a finding with the pip command that adds it; a missing one that also
    does not import is reported once."""
    from importlib import metadata

    real = metadata.version

    def version(name):
        if name == "papermill":
            raise metadata.PackageNotFoundError(name)
        return "1.0" if name == "scipy" else real(name)

    monkeypatch.setattr(metadata, "version", version)
    deps = doctor._requirements(own=False)
    assert deps["papermill"] == Finding("papermill", "missing", "needs >= 2.5",
                                        "pip install 'papermill>=2.5'")
    assert deps["scipy"] == Finding("scipy", "too_old", "1.0, needs >= 1.11",
                                    "pip install 'scipy>=1.11'")
    assert deps["numpy"] == Finding("numpy", "ok", real("numpy"))
    assert str(deps["papermill"]) == "papermill: missing (needs >= 2.5); pip install 'papermill>=2.5'"
    assert doctor._requirements(own=True)["scipy"].fix == FIX_ENV  # the checkout: rebuild it
    not_importable = Finding("papermill", "missing", "not importable: ...", "pip install papermill")
    problems = doctor._problems([*deps.values(), not_importable])
    assert [(p.component, p.status) for p in problems] == [("scipy", "too_old"),
                                                           ("papermill", "missing")]
    assert problems[1] is deps["papermill"]  # the dependency's finding, not the import's


def test_a_module_that_does_not_import_is_missing_with_its_fix():
    found = doctor._version("no_such_module_gan3d", own=False)
    assert (found.component, found.status, found.fix) == (
        "no_such_module_gan3d", "missing", "pip install no_such_module_gan3d")
    assert "ModuleNotFoundError" in found.detail
    assert doctor._version("yaml", own=False).ok


@pytest.mark.parametrize("build, status, in_fix", [
    ({"error": "No module named 'horovod'"}, "missing", "site's Horovod module"),
    ({"version": "0.28.1", "tensorflow": True, "mpi": False, "gloo": True, "nccl": False},
     "incomplete", FIX_ENV),
    ({"version": "0.28.1", "tensorflow": True, "mpi": True, "gloo": True, "nccl": False}, "ok", ""),
])
def test_horovod_findings(build, status, in_fix):
    found = doctor._horovod(build, own=False, gpu_tf=False)
    assert found.component == "horovod" and found.status == status and in_fix in found.fix
    if status == "incomplete":
        assert found.detail == "built without MPI"


def test_doctor_says_what_a_gpu_node_lacks():
    """On a GPU node the CPU build of TensorFlow, or Horovod without NCCL, is a finding with its
    fix; with the CUDA build and NCCL both are ok; without GPUs neither is checked."""
    hvd = {"version": "0.28.1", "tensorflow": True, "mpi": True, "gloo": True, "nccl": False}
    cpu_build = {"cuda": None, "cudnn": None}
    tf, horovod = doctor._gpu_checks(1, cpu_build, hvd)
    assert (tf.component, tf.status) == ("tensorflow", "mismatch")
    assert "tensorflow[and-cuda]" in tf.fix and tf.detail == "the CPU build, with 1 GPU(s)"
    assert (horovod.component, horovod.status) == ("horovod", "incomplete")
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in horovod.fix
    built = doctor._gpu_checks(4, {"cuda": "12.5.1", "cudnn": "9"}, dict(hvd, nccl=True))
    assert [f.status for f in built] == ["ok", "ok"]
    assert doctor._gpu_checks(0, cpu_build, hvd) == []
    # this CPU machine: no GPU found, the pinned CPU build of TensorFlow
    assert doctor._gpus() == ([], 0)
    assert doctor._tensorflow_build() == cpu_build


def test_two_mpi_libraries_loaded_are_a_mismatch(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /opt/site/lib/libmpi.so.40\n"
                    "7f02-7f03 r-xp 0 08:01 2 /venv/lib/libmpi.so.40\n"
                    "7f04-7f05 r-xp 0 08:01 3 /lib/libc.so.6\n")
    mixed = doctor._loaded_libmpi(maps)
    assert mixed.status == "mismatch" and "/opt/site/lib/libmpi.so.40" in mixed.detail
    assert "/venv/lib/libmpi.so.40" in mixed.detail and "libc" not in mixed.detail
    assert doctor._loaded_libmpi().ok  # this process: one libmpi (or none loaded yet)


def test_the_report_lists_each_problem_with_its_fix(monkeypatch, capsys):
    missing = Finding("papermill", "missing", "needs >= 2.5", "pip install 'papermill>=2.5'")
    monkeypatch.setattr(doctor, "collect", lambda: ({"papermill": missing}, [missing]))
    assert doctor.report() == 1
    out = capsys.readouterr().out
    assert "papermill  MISSING (needs >= 2.5)" in out
    assert "1 problem(s):\n  - papermill: missing (needs >= 2.5); pip install 'papermill>=2.5'" in out


def test_the_doctor_names_what_auto_precision_trains_in_here_and_why(monkeypatch):
    from gan3d import config, doctor
    from gan3d.parallel import runtime

    for has_bf16, want in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(runtime, "cpu_has_bf16", lambda *a, has=has_bf16: has)
        line = doctor.auto_precision(0)
        assert line.split()[0] == want == config.resolved_precision(config.resolve("quick")).train.precision
        assert ("has bfloat16 arithmetic" if has_bf16 else "no bfloat16 arithmetic") in line
    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda *a: True)
    for amx in (True, False):  # where oneDNN uses AMX, the doctor says what is computed otherwise
        monkeypatch.setattr(runtime, "onednn_uses_amx", lambda *a, amx=amx: amx)
        assert ("first convolution" in doctor.auto_precision(0)) is amx
    assert doctor.auto_precision(1).startswith("float32 (a GPU")
