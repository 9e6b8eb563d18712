"""The job scripts of cluster/ (Slurm, PBS) as their scheduler runs them.

The slow tests run each launcher once, for real, with 2 ranks and a tiny quick run: the script is
started the way a scheduler starts it (its variables set, the job's working folder elsewhere),
with a stub of what only a cluster has. The stub `srun` starts its tasks as Open MPI ranks of this
machine, each seeing what a task of `srun --mpi=pmix` sees (SLURM_PROCID and PMIx, none of
mpirun's OMPI_COMM_WORLD_*); the stub `module` records what it was asked to load. The training
itself is the package's. The fast tests check the scripts' syntax, their headers, the launch
command each builds for several nodes, and that docs/cluster.md names what the scripts read.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from gan3d.parallel import runtime
from gan3d.parallel.launch import in_mpi_job

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {"slurm": ROOT / "cluster" / "slurm.sh", "pbs": ROOT / "cluster" / "pbs.sh"}
DOCS = ROOT / "docs" / "cluster.md"
VENV = runtime.env_bin().parent  # the environment running the tests: the job's GAN3D_VENV

# A quick run of 2 tiny steps on each of 2 ranks, one epoch, a checkpoint at its end.
TINY = {"data.n_showers": 48, "data.n_files": 4, "data.test_fraction": 0.25,
        "train.batch_size": 2, "train.steps_per_epoch": 2, "train.epochs": 1,
        "train.eval_fraction": 0.5, "train.monitor_showers": 0}


def _bin(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body))
    path.chmod(0o755)


def _stubs(folder: Path, log: Path, nodes: tuple[str, ...] = ("localhost",)) -> Path:
    """srun, module and scontrol of a stub Slurm on this machine; each call is logged."""
    folder.mkdir()
    mpirun = shutil.which("mpirun", path=str(runtime.env_bin()))
    binding = shlex.join(runtime.mpirun_command(2, [])[3:])  # the package's flags for 2 ranks
    _bin(folder, "srun-task", """\
        # one task of the stub srun: what srun --mpi=pmix gives a task, not what mpirun gives
        export SLURM_PROCID=$OMPI_COMM_WORLD_RANK SLURM_LOCALID=$OMPI_COMM_WORLD_LOCAL_RANK
        unset "${!OMPI_COMM_WORLD_@}"
        exec "$@"
        """)
    _bin(folder, "srun", f"""\
        echo "srun $*" >> {shlex.quote(str(log))}
        while [[ $1 == -* ]]; do shift; done  # srun's options, all given as --name=value
        exec {mpirun} -np "$SLURM_NTASKS" {binding} {folder / 'srun-task'} "$@"
        """)
    _bin(folder, "module", f'echo "module $*" >> {shlex.quote(str(log))}\n')
    _bin(folder, "scontrol", f'[[ "$*" == "show hostnames $SLURM_JOB_NODELIST" ]] && '
                             f'printf "%s\\n" {" ".join(nodes)}\n')
    return folder


def _environment(tmp: Path, scheduler: str, stubs: Path | None, nodes: int = 1,
                 per_node: int = 2, **gan3d: str) -> dict:
    """What the scheduler gives the job script: its variables, and this process's environment
    without anything of a job, a launcher or an activated environment (PATH: the system's)."""
    job = ("SLURM_", "PBS_", "OMPI_COMM_WORLD_", "PMIX_", "PMI_", "HOROVOD_", "BASH_FUNC_",
           "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(job)
           and not (k.startswith("GAN3D_") and k != "GAN3D_ROOT")}
    env["PATH"] = os.pathsep.join([*([str(stubs)] if stubs else []), "/usr/bin", "/bin"])
    work = tmp / "submit"
    work.mkdir(exist_ok=True)
    if scheduler == "slurm":
        env.update(SLURM_JOB_ID="4242", SLURM_NTASKS=str(nodes * per_node),
                   SLURM_JOB_NUM_NODES=str(nodes), SLURM_NTASKS_PER_NODE=str(per_node),
                   SLURM_JOB_NODELIST="localhost" if nodes == 1 else f"node[1-{nodes}]",
                   SLURM_SUBMIT_DIR=str(work))
    else:
        nodefile = tmp / "nodefile"
        names = ["localhost"] if nodes == 1 else [f"node{i + 1}" for i in range(nodes)]
        nodefile.write_text("".join(f"{n}\n" for n in names for _ in range(per_node)))
        env.update(PBS_JOBID="4243.pbs", PBS_NODEFILE=str(nodefile), PBS_O_WORKDIR=str(work))
    env.update(GAN3D_VENV=str(VENV), **gan3d)
    return env


def _submit(scheduler: str, env: dict, home: Path, timeout: float = 600):
    """Run the job script as the scheduler would: bash, in a session of its own, from $HOME."""
    home.mkdir(exist_ok=True)
    proc = subprocess.Popen(["bash", str(SCRIPTS[scheduler])], env=env, cwd=home, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and every rank
        out, err = proc.communicate()
        raise AssertionError(f"the job ran over {timeout} s:\n{out[-3000:]}\n{err[-3000:]}")
    return proc.returncode, out, err


# ---------------------------------------------------------------------------------------------
# Fast: syntax, headers, the launch commands, the docs


@pytest.mark.parametrize("scheduler", SCRIPTS)
def test_the_scripts_parse(scheduler):
    assert os.access(SCRIPTS[scheduler], os.X_OK)
    subprocess.run(["bash", "-n", str(SCRIPTS[scheduler])], check=True)


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck is not installed (Debian: apt-get install shellcheck)")
def test_the_scripts_are_shellcheck_clean():
    res = subprocess.run(["shellcheck", *map(str, SCRIPTS.values())], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stdout


def test_the_headers_ask_for_one_rank_per_gpu_on_several_nodes():
    slurm = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", SCRIPTS["slurm"].read_text(), re.M))
    assert slurm["ntasks-per-node"] == slurm["gpus-per-node"]
    assert int(slurm["nodes"]) > 1 and re.fullmatch(r"\d+:\d\d:\d\d", slurm["time"])
    pbs = SCRIPTS["pbs"].read_text()
    select = dict(kv.split("=") for kv in
                  re.search(r"^#PBS -l select=(\d+):(\S+)", pbs, re.M).group(2).split(":"))
    assert select["mpiprocs"] == select["ngpus"]
    assert int(re.search(r"^#PBS -l select=(\d+)", pbs, re.M).group(1)) > 1
    assert re.search(r"^#PBS -l walltime=\d+:\d\d:\d\d$", pbs, re.M)
    for text in (SCRIPTS["slurm"].read_text(), pbs):  # no header after the first command
        first = next(i for i, line in enumerate(text.splitlines())
                     if line.strip() and not line.startswith("#"))
        assert not re.search(r"^#(SBATCH|PBS) ", "\n".join(text.splitlines()[first:]), re.M)


LAUNCHES = {  # the command each script says for 3 nodes of 4 GPUs
    ("slurm", "srun"): "srun --mpi=pmix --cpu-bind=cores gan3d train",
    ("slurm", "mpirun"): "mpirun -np 12 -H node1:4,node2:4,node3:4 -x PATH",
    ("slurm", "horovodrun"): "horovodrun -np 12 -H node1:4,node2:4,node3:4 --gloo gan3d train",
    ("pbs", "mpirun"): "mpirun -np 12 -H node1:4,node2:4,node3:4 -x PATH",
    ("pbs", "horovodrun"): "horovodrun -np 12 -H node1:4,node2:4,node3:4 --gloo gan3d train",
}


@pytest.mark.parametrize("scheduler,launcher", LAUNCHES)
def test_each_launcher_starts_one_rank_per_gpu_of_every_node(tmp_path, scheduler, launcher):
    stubs = _stubs(tmp_path / "bin", tmp_path / "log", nodes=("node1", "node2", "node3"))
    env = _environment(tmp_path, scheduler, stubs, nodes=3, per_node=4, GAN3D_DRY_RUN="1",
                       GAN3D_LAUNCHER=launcher, GAN3D_DATA="/scratch/clic",
                       GAN3D_SETS="data.source=clic train.eval_mode=distributed")
    code, out, err = _submit(scheduler, env, tmp_path / "home", timeout=60)
    assert code == 0, err
    job = "4242" if scheduler == "slurm" else "4243.pbs"
    head, command = out.splitlines()
    assert head == f"gan3d job {job}: 12 ranks on 3 node(s) from {tmp_path / 'submit'}"
    assert command.startswith(LAUNCHES[scheduler, launcher])
    assert command.endswith(f"gan3d train --profile paper --output results/training/paper-{job}"
                            " --set data.path=/scratch/clic --set data.source=clic"
                            " --set train.eval_mode=distributed")
    assert not (tmp_path / "log").exists()  # a dry run starts nothing


@pytest.mark.parametrize("scheduler", SCRIPTS)
def test_an_unknown_launcher_or_environment_is_refused_in_one_line(tmp_path, scheduler):
    env = _environment(tmp_path, scheduler, None, GAN3D_LAUNCHER="ssh")
    code, out, err = _submit(scheduler, env, tmp_path / "home", timeout=60)
    assert code == 2 and out == "" and err.startswith("gan3d job: GAN3D_LAUNCHER=ssh: choose ")
    env.update(GAN3D_VENV=str(tmp_path / "nothing"), GAN3D_LAUNCHER="mpirun")
    code, out, err = _submit(scheduler, env, tmp_path / "home", timeout=60)
    assert code == 2 and err == f"gan3d job: GAN3D_VENV={tmp_path / 'nothing'}: no Python " \
                                "environment there\n"


def test_the_docs_name_the_scripts_and_every_variable_they_read():
    docs = DOCS.read_text()
    assert "sbatch cluster/slurm.sh" in docs and "qsub cluster/pbs.sh" in docs
    named = set(re.findall(r"\bGAN3D_[A-Z_]+", docs))
    read = set()
    for script in SCRIPTS.values():
        read |= set(re.findall(r"^(GAN3D_[A-Z_]+)=", script.read_text(), re.M))
    assert named == read
    for launcher in ("srun", "mpirun", "horovodrun"):
        assert f"GAN3D_LAUNCHER={launcher}" in docs or f"`{launcher}`" in docs


def test_a_task_of_srun_with_pmix_or_pmi2_is_a_rank(monkeypatch):
    """srun starts every task itself: without mpirun's variables `gan3d train` must still know it
    is one rank of a job and not launch ranks of its own."""
    for key in ("OMPI_COMM_WORLD_SIZE", "HOROVOD_SIZE", "PMI_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "0")  # srun --mpi=none: no MPI, not a rank
    assert not in_mpi_job()
    monkeypatch.setenv("PMIX_RANK", "0")  # --mpi=pmix (Open MPI 5)
    assert in_mpi_job()
    monkeypatch.delenv("PMIX_RANK")
    monkeypatch.setenv("PMI_SIZE", "4")  # --mpi=pmi2
    assert in_mpi_job()


# ---------------------------------------------------------------------------------------------
# Slow: one real 2-rank job per launcher


RUNS = {"slurm-srun": ("slurm", "srun"), "pbs-mpirun": ("pbs", "mpirun"),
        "pbs-horovodrun": ("pbs", "horovodrun")}


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.parametrize("run", RUNS)
def test_a_job_trains_on_two_ranks(tmp_path, run):
    scheduler, launcher = RUNS[run]
    stubs = _stubs(tmp_path / "bin", tmp_path / "log") if scheduler == "slurm" else None
    out_dir = tmp_path / "out"
    env = _environment(tmp_path, scheduler, stubs, GAN3D_LAUNCHER=launcher, GAN3D_PROFILE="quick",
                       GAN3D_MODULES="tensorflow horovod", GAN3D_DATA=str(tmp_path / "data"),
                       GAN3D_OUTPUT=str(out_dir),
                       GAN3D_SETS=" ".join(f"{k}={v}" for k, v in TINY.items()))
    code, out, err = _submit(scheduler, env, tmp_path / "home")
    assert code == 0, f"{out[-3000:]}\n{err[-3000:]}"
    assert f"2 ranks on 1 node(s) from {tmp_path / 'submit'}\n" in out
    rows = [json.loads(line) for line in (out_dir / "history.jsonl").read_text().splitlines()]
    assert [(r["epoch"], r["workers"], r["showers_seen"]) for r in rows] == [(1, 2, 2 * 2 * 2)]
    assert (out_dir / "checkpoints" / "epoch-0001.npz").stat().st_size > 1_000_000
    if scheduler == "slurm":  # srun started the ranks, after the modules were loaded
        assert (tmp_path / "log").read_text().splitlines() == [
            "module load tensorflow horovod", "srun --mpi=pmix --cpu-bind=cores gan3d train "
            f"--profile quick --output {out_dir} --set data.path={tmp_path / 'data'} "
            + " ".join(f"--set {k}={v}" for k, v in TINY.items())]
    else:  # no module command on this "cluster": said, and the job goes on
        assert "no 'module' command here: GAN3D_MODULES (tensorflow horovod) not loaded" in err
    if launcher == "horovodrun":  # horovodrun's tags on the ranks' output
        assert re.search(r"^\[[01]\]<std(out|err)>:", out + err, re.M)
