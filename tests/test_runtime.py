"""Process settings for MPI and TensorFlow: threads per rank, mpirun's binding, the environment."""

from __future__ import annotations

import os

import pytest

from gan3d.parallel import runtime
from gan3d.exceptions import ConfigError, EnvironmentProblem


@pytest.mark.parametrize("own, parent, local_size, threads", [
    (8, 16, 2, 8),    # 16 cores, 2 ranks bound by mpirun: each uses its own 8 cores
    (16, 16, 2, 8),   # 16 cores, 2 unbound ranks (ipyparallel engines): they share them
    (1, 2, 2, 1),     # this machine under the package's mpirun
    (2, 2, 2, 1),     # this machine, 2 engines
    (2, 2, 1, 2),     # one process alone gets every core
    (2, 2, 4, 1),     # oversubscribed: never fewer than one thread
    (4, 64, 1, 4),    # a container's cpuset of 4 cores, one rank
])
def test_threads_per_rank(own, parent, local_size, threads):
    assert runtime.threads_per_rank(own, parent, local_size) == threads


def test_local_rank_from_each_launcher(monkeypatch):
    for key in ("OMPI_COMM_WORLD_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE", "MPI_LOCALNRANKS"):
        monkeypatch.delenv(key, raising=False)
    assert runtime.local_rank_info() == (0, 1)
    monkeypatch.setenv("HOROVOD_LOCAL_RANK", "1")
    monkeypatch.setenv("HOROVOD_LOCAL_SIZE", "4")
    assert runtime.local_rank_info() == (1, 4)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3")
    assert runtime.local_rank_info() == (2, 3)  # Open MPI's first


@pytest.mark.parametrize("np_, cores, expected", [
    (1, 2, ["--map-by", "slot:PE=2", "--bind-to", "core"]),
    (2, 2, ["--map-by", "slot:PE=1", "--bind-to", "core"]),
    (2, 16, ["--map-by", "slot:PE=8", "--bind-to", "core"]),
    (4, 2, ["--map-by", "slot:OVERSUBSCRIBE", "--bind-to", "none"]),
])
def test_mpirun_binds_up_to_one_rank_per_core(monkeypatch, np_, cores, expected):
    monkeypatch.setattr(runtime, "cpu_count", lambda: cores)
    cmd = runtime.mpirun_command(np_, ["python", "x.py"], extra=["-x", "A=1"])
    assert cmd[1:3] == ["-np", str(np_)] and cmd[3:7] == expected
    assert cmd[-4:] == ["-x", "A=1", "python", "x.py"]
    assert os.path.basename(cmd[0]) == "mpirun"


def test_missing_mpirun_is_a_named_error(monkeypatch):
    monkeypatch.setattr(runtime.shutil, "which", lambda *a, **k: None)
    with pytest.raises(EnvironmentProblem, match="make env"):
        runtime.mpirun_command(2, ["x"])


def test_defaults_never_override_the_user(monkeypatch):
    monkeypatch.setenv("HOROVOD_CYCLE_TIME", "1")
    monkeypatch.setenv("PATH", "/usr/bin")
    env = runtime.mpi_environment()
    assert env["HOROVOD_CYCLE_TIME"] == "1"  # the user's value
    assert env["OMPI_MCA_mpi_yield_when_idle"] == "1"  # the package's default
    assert env["PATH"].split(os.pathsep)[0] == str(runtime.env_bin())  # our mpirun first
    runtime.apply_process_defaults()
    assert os.environ["HOROVOD_CYCLE_TIME"] == "1"
    assert os.environ["PATH"].startswith(str(runtime.env_bin()) + os.pathsep)


def test_auto_precision_follows_the_cpu_flags(tmp_path, monkeypatch):
    from gan3d import config

    plain, bf16 = tmp_path / "plain", tmp_path / "bf16"
    plain.write_text("flags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n")
    bf16.write_text("flags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n")
    assert runtime.resolve_precision("auto", plain) == "float32"
    assert runtime.resolve_precision("auto", bf16) == "bfloat16"
    assert runtime.resolve_precision("auto", tmp_path / "absent") == "float32"
    assert runtime.resolve_precision("bfloat16", plain) == "bfloat16"  # asked for: kept
    assert runtime.resolve_precision("float16") == "float16"  # GPUs; config refuses it on CPUs
    with pytest.raises(ConfigError, match="float16"):
        runtime.resolve_precision("float8")
    cfg = config.resolve("quick")
    assert cfg.train.precision == "auto"
    # training's auto: bfloat16 only on a CPU that has it and only while the evidence says it
    # trains like float32 (config.TRAINING_AUTO_CPU_BF16; test_claims ties it to the ledger)
    for has in (True, False):
        monkeypatch.setattr(runtime, "cpu_has_bf16", lambda *a, has=has: has)
        expected = "bfloat16" if has and config.TRAINING_AUTO_CPU_BF16 else "float32"
        assert config.resolved_precision(cfg).train.precision == expected
        jax = cfg.replace(**{"train.backend": "jax"})  # not measured with JAX: float32
        assert config.resolved_precision(jax).train.precision == "float32"
        pinned = cfg.replace(**{"train.precision": "bfloat16"})
        assert config.resolved_precision(pinned).train.precision == "bfloat16"  # asked for


def test_onednn_uses_amx_where_the_cpu_has_it_unless_capped_or_off(tmp_path):
    amx, avx = tmp_path / "amx", tmp_path / "avx"
    amx.write_text("flags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile\n")
    avx.write_text("flags\t\t: fpu avx512f avx512_bf16\n")
    assert runtime.onednn_uses_amx(amx, env={})
    assert not runtime.onednn_uses_amx(avx, env={})
    assert not runtime.onednn_uses_amx(tmp_path / "none", env={})
    for cap, uses in (("AVX512_CORE_BF16", False), ("avx2", False), ("AVX512_CORE_AMX", True),
                      ("ALL", True), ("", True)):
        assert runtime.onednn_uses_amx(amx, env={"ONEDNN_MAX_CPU_ISA": cap}) is uses, cap
    assert not runtime.onednn_uses_amx(amx, env={"TF_ENABLE_ONEDNN_OPTS": "0"})
