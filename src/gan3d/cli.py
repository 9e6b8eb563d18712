"""The ``gan3d`` command.

    gan3d doctor                                  # is the environment complete?
    gan3d data generate --profile quick           # synthetic showers in the CLIC schema
    gan3d data check data/synthetic               # validate a folder of shower files
    gan3d train --profile quick --workers 2       # launches 2 MPI ranks by itself
    mpirun -np 4 gan3d train --profile paper      # or under any launcher (horovodrun too)
    gan3d scale --profile quick                   # scaling experiments
    gan3d scale --workers 1,2 --network 1gbe      # ... ranks on an emulated 1 GbE network (root)
    gan3d validate results/training/train_1w      # physics validation of a trained generator
    gan3d simulate --generator results/training/train_1w --n 1000 --output sim.h5
    gan3d reproduce --profile quick               # every figure of the study
    gan3d lab                                     # JupyterLab on notebooks/ with the gan3d kernel

Every subcommand that takes a configuration accepts ``--profile`` and any number of
``--set section.key=value`` overrides; the resolved configuration is recorded in every output.
Errors a user can cause print one line saying what to fix (exit status 2), not a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Sequence

from . import __version__, console
from .config import PROFILES, parse_overrides, resolve
from .exceptions import Gan3dError
from .parallel.launch import guard, in_mpi_job, launch
from .parallel.runtime import apply_process_defaults

__all__ = ["main", "build_parser"]


def _here(path: str) -> str:
    """A path typed on the command line is taken from the current folder, as every command-line
    tool does (paths inside settings, ``--set`` included, are taken from the checkout's root)."""
    return str(Path(path).expanduser().absolute())


def _recorded(path: str | None) -> str | None:
    """A path typed for a run that records its settings (``gan3d train``), as the record keeps it:
    relative to the checkout's root where it lies inside the checkout - settings' paths are taken
    from there, so it names the same file, and a committed checkpoint names no folder of the
    machine that made it - else as typed (absolute, :func:`_here`)."""
    from .io import repo_root

    if not path:
        return path
    try:
        return str(Path(path).relative_to(repo_root()))
    except ValueError:
        return path


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="quick", choices=PROFILES,
                   help="named settings: quick (2-core laptop), paper (the paper's, for clusters) "
                        "or study (quick with the full convergence study)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one setting, e.g. --set train.epochs=5 (repeatable)")


def _config(args: argparse.Namespace, **extra):
    overrides = parse_overrides(args.overrides)
    overrides.update({k: v for k, v in extra.items() if v is not None})
    return resolve(args.profile, overrides)


class _Help(argparse.RawDescriptionHelpFormatter):
    """Examples kept as written; each option's default shown where it has one of its own (an
    option without one takes the profile's setting it names)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default not in (None, False, [], argparse.SUPPRESS) and "default" not in text:
            text += " (default: %(default)s)"
        elif action.default is None and re.search(r"\b(data|train|scale|validation)\.\w", text):
            text += " (default: the profile's)"
        return text


# What each command's --help ends with: commands a user can copy.
EXAMPLES = {
    "": ["gan3d doctor                      # what the environment has, and what is missing",
         "make figures                      # every figure of the study (gan3d reproduce)",
         "gan3d train --workers 2           # 3DGAN on 2 MPI ranks of this machine",
         "gan3d simulate --generator long-1w --n 1000 --output showers.h5",
         "gan3d <command> --help            # a command's options and examples"],
    "doctor": ["gan3d doctor"],
    "data generate": ["gan3d data generate                          # the profile's data set",
                      "gan3d data generate --n-showers 2000 --files 8 --output data/small"],
    "data check": ["gan3d data check data/data", "gan3d data check /path/to/EleEscan_1_1.h5"],
    "train": ["gan3d train --workers 2                      # quick profile, 2 MPI ranks",
              "gan3d train --set train.epochs=5 --output results/training/try",
              "gan3d train --output results/training/try --resume",
              "gan3d train --fork-from studies/warm-start/epoch-0026.npz --epochs 30 --workers 2",
              "gan3d train --workers 4 --lr-rule sqrt --lr-warmup-epochs 1",
              "mpirun -np 4 gan3d train --profile paper    # on a cluster (docs/cluster.md)",
              "gan3d train --backend jax --workers 2",
              "tensorboard --logdir results/training       # the scalars every run writes"],
    "scale": ["gan3d scale --workers 1,2 --mode strong",
              "gan3d scale --workers 1,2 --network 10gbe   # an emulated network (as root)"],
    "validate": ["gan3d validate long-1w long-2w", "gan3d validate results/training/train_1w"],
    "simulate": ["gan3d simulate --n 1000 --output showers.h5   # the best shipped generator",
                 "gan3d simulate --generator long-1w --n 1000 --energies 50,100,200 "
                 "--output showers.h5",
                 "gan3d simulate --generator results/training/run --n 100 --output x.h5 --force"],
    "export": ["gan3d export results/training/run shipped/",
               "gan3d export results/training/run/checkpoints/epoch-0010.npz shipped/ --force"],
    "study": ["gan3d study --profile study --status",
              "gan3d study --profile study --max-runs 1",
              "gan3d study --profile study --verify-code 244eb25"],
    "warm-start": ["gan3d warm-start --status", "gan3d warm-start --until-decided 6",
                   "gan3d warm-start --verify-code 99e8fc3"],
    "reproduce": ["gan3d reproduce                 # = make figures",
                  "gan3d reproduce --only 04_physics_validation.ipynb",
                  "gan3d reproduce --profile paper --force"],
    "lab": ["gan3d lab", "gan3d lab --port 8890"],
}


def _document(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """Give every command its one-line help as a description, its examples, and defaults."""
    parser.formatter_class = _Help
    examples = EXAMPLES.get(prefix.strip())
    if examples:
        parser.epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                sub.description = sub.description or helps.get(name)
                _document(sub, f"{prefix}{name} ")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gan3d", formatter_class=_Help,
        description="Train 3DGAN data-parallel (Horovod, or JAX), reproduce the study's figures, "
                    "validate trained generators against reference showers and simulate showers "
                    "with them. Errors a user can cause print one line saying what to fix "
                    "(exit 2).")
    parser.add_argument("--version", action="version", version=f"gan3d {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="check the environment and say how to fix what is missing")
    _data_parser(sub)
    _train_parser(sub)
    _scale_parser(sub)
    _validate_parser(sub)
    _study_parser(sub)
    _warm_parser(sub)
    _simulate_parser(sub)
    _export_parser(sub)
    rep = sub.add_parser("reproduce", help="run every notebook and regenerate every figure")
    _add_config_args(rep)
    rep.add_argument("--force", action="store_true", help="redo every step, even if up to date")
    rep.add_argument("--only", action="append", default=None, metavar="NOTEBOOK",
                     help="run only these notebooks (name or number, repeatable)")
    sub.add_parser("lab", help="open JupyterLab on notebooks/ with the gan3d kernel "
                   "(further options are passed to JupyterLab)")
    _document(parser)
    return parser


def _data_parser(sub) -> None:
    data = sub.add_parser("data", help="make or check shower files")
    dsub = data.add_subparsers(dest="data_command", required=True)
    gen = dsub.add_parser("generate", help="write synthetic showers in the CLIC HDF5 schema")
    _add_config_args(gen)
    gen.add_argument("--n-showers", type=int, help="number of showers (data.n_showers)")
    gen.add_argument("--files", type=int, help="number of files (data.n_files)")
    gen.add_argument("--seed", type=int, help="random seed (data.seed)")
    gen.add_argument("--output", type=_here, help="output folder (data.path)")
    gen.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    chk = dsub.add_parser("check", help="validate every shower file in a folder, or one file "
                          "(exit 1: problems)")
    chk.add_argument("folder", type=_here, help="a folder of .h5 shower files, or one .h5 file")
    _add_config_args(chk)


def _train_parser(sub) -> None:
    train = sub.add_parser("train", help="train 3DGAN (data parallel with Horovod)")
    _add_config_args(train)
    train.add_argument("--workers", type=int, help="MPI ranks to launch on this machine "
                       "(train.workers); ignored when already started by mpirun/horovodrun")
    train.add_argument("--epochs", type=int, help="train.epochs")
    train.add_argument("--output", type=_here, help="train.output folder")
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    train.add_argument("--force", action="store_true", help="replace the run the output folder "
                       "holds (without it, such a folder is refused)")
    train.add_argument("--fork-from", metavar="CHECKPOINT", type=_here,
                       help="train.fork_from: start a new run from this checkpoint (an "
                            "epoch-NNNN.npz or a run's folder) with this run's workers, lr rule, "
                            "precision, seed and data; epochs count on from its epoch")
    train.add_argument("--backend", choices=("horovod", "jax"),
                       help="train.backend: horovod (TensorFlow + Horovod) or jax (Keras on JAX)")
    train.add_argument("--lr-rule", choices=("linear", "sqrt", "none"),
                       help="train.lr_rule: the learning rate on N workers: lr x N (the paper's), "
                            "lr x sqrt(N) or lr (figures/CLAIMS.md, lr-rule, says which trains "
                            "like one worker)")
    train.add_argument("--lr-warmup-epochs", type=int, metavar="E",
                       help="train.lr_warmup_epochs: reach the rule's lr from lr over the first E "
                            "epochs (of a fork: its first E)")


def _scale_parser(sub) -> None:
    scale = sub.add_parser("scale", help="time training for several worker counts")
    _add_config_args(scale)
    scale.add_argument("--workers", help="comma-separated worker counts, e.g. 1,2,4")
    scale.add_argument("--mode", choices=("weak", "strong"))
    scale.add_argument("--output", type=_here, help="scale.output folder")
    scale.add_argument("--network", metavar="PROFILE",
                       help="run each multi-worker job with its ranks in separate network "
                            "namespaces behind links of this profile (root): native, edr, 10gbe, 1gbe")


def _validate_parser(sub) -> None:
    val = sub.add_parser("validate", help="compare trained generators with reference showers")
    _add_config_args(val)
    val.add_argument("checkpoints", nargs="+", help="training output folders (with generator.keras), folders `gan3d export` wrote, or a shipped generator's name: `reference`, `long-1w`, `long-2w`")
    val.add_argument("--labels", help="comma-separated names, one per folder (default: folder names)")
    val.add_argument("--no-low-level", action="store_true", help="skip the voxel-level classifier")
    val.add_argument("--output", type=_here, help="validation.output folder")
    val.add_argument("--force", action="store_true", help="replace the validation the output "
                     "folder holds (its metrics.json)")


def _simulate_parser(sub) -> None:
    sim = sub.add_parser("simulate", help="generate showers with a trained generator, written in "
                         "the CLIC HDF5 schema")
    sim.add_argument("--generator",
                     help="a training output folder (with generator.keras), a .keras file, a "
                          "folder `gan3d export` wrote, or a shipped generator's name: "
                          "`long-1w` and `long-2w` (the long runs' pair, 227,200 showers), "
                          "`reference` (the learning curve's, 40,000 showers) (default: the "
                          "shipped generator that met the most physics targets)")
    sim.add_argument("--n", type=int, required=True, help="number of showers")
    sim.add_argument("--energies", default="10:500",
                     help="primary energies in GeV: LO:HI (uniform) or a list 50,100,200")
    sim.add_argument("--output", required=True, type=_here, help="the .h5 file to write")
    sim.add_argument("--batch", type=int, default=64, help="showers per inference call")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--precision", default="auto", choices=("auto", "float32", "bfloat16"),
                     help="auto: bfloat16 where the CPU has bfloat16 arithmetic, else float32")
    sim.add_argument("--force", action="store_true",
                     help="replace the file --output names if it exists (else refused)")
    sim.add_argument("--strict", action="store_true",
                     help="refuse energies outside those the generator was trained on "
                          "(default: simulate them with a warning naming its range)")


def _export_parser(sub) -> None:
    ex = sub.add_parser("export", help="ship a trained generator as weights only (float32, "
                        "~3.9 MB) with its learning curve and provenance")
    ex.add_argument("source", type=_here, help="a training output folder, or one of its checkpoints "
                                   "(epoch-NNNN.npz)")
    ex.add_argument("folder", type=_here, help="the folder to write (generator.weights.h5, "
                                   "discriminator.weights.h5, reference.json); pass it later "
                                   "where a training folder is expected")
    ex.add_argument("--note", default="", help="a line on what it is, kept in reference.json")
    ex.add_argument("--force", action="store_true",
                    help="replace the export the folder holds (else refused)")
    ex.add_argument("--monitor-showers", type=int, default=256,
                    help="showers per monitor energy of its final monitors")


def _verify_args(p: argparse.ArgumentParser, kinds: str) -> None:
    """A study's behavioural check of this checkout's training code (gan3d.convergence.verify)."""
    p.add_argument("--verify-code", metavar="COMMIT|DIR",
                   help="show that this checkout's training code makes the study's numbers: short "
                        "runs of every kind the study holds, trained with it and with the package "
                        "that made the study (a commit of this repository, or a folder holding a "
                        "copy), equal bit for bit; then the runs stay current and this checkout "
                        "may add runs")
    p.add_argument("--kinds", metavar="K,K", help="with --verify-code: check these kinds of run "
                   f"({kinds}) instead of the study's own")
    p.add_argument("--showers", type=int, default=256,
                   help="with --verify-code: showers of each short run")


def _study_parser(sub) -> None:
    st = sub.add_parser("study", help="the convergence study: N workers against one over seeds, "
                        "local SGD, learning-rate rules (resumable; --profile study: the full one)")
    _add_config_args(st)
    st.add_argument("--block", choices=("eq", "sync", "lr"), help="only the runs of one block")
    st.add_argument("--max-runs", type=int, help="stop after this many runs (continue later)")
    st.add_argument("--restart", action="store_true", help="forget the results file's runs first")
    st.add_argument("--status", action="store_true", help="say how far the study is; run nothing")
    _verify_args(st, "1w, allreduce, local-sgd, warmup, bfloat16")
    st.add_argument("--allow-dirty", action="store_true",
                    help="write into studies/ (or, with --verify-code, check) from a tree with "
                         "uncommitted changes; the file is then marked clean: false")


def _say_verified(entry, output: str, current: str) -> None:
    """What ``--verify-code`` found: each kind compared and how equal, or ``current``."""
    print(f"{current}: nothing to verify" if entry is None
          else f"{output}: this checkout's code makes the study's numbers in "
          + "; ".join(f"{k} ({c['compared']}, {c['equality']})" for k, c in entry["kinds"].items())
          + "".join(f"; {k} not checked: {why}" for k, why in entry["not_checked"].items()))


def _cmd_study(args: argparse.Namespace) -> int:
    from .convergence import study

    cfg = _config(args)
    if args.verify_code:
        kinds = args.kinds.split(",") if args.kinds else None
        entry = study.verify(cfg, args.verify_code, showers=args.showers, kinds=kinds,
                             allow_dirty=args.allow_dirty)
        _say_verified(entry, cfg.study.output, "this checkout has the study's code version")
    elif not args.status:
        study.run_study(cfg, only=args.block, max_runs=args.max_runs, restart=args.restart,
                        allow_dirty=args.allow_dirty)
    state = study.status(cfg)
    print(f"{cfg.study.output}: {state['done']} of {state['planned']} runs done"
          + (f", {len(state['stale'])} stale" if state["stale"] else "")
          + (f"; missing: {', '.join(state['missing'])}" if state["missing"] else ""))
    verdicts = study.load(cfg.study.output).get("verdicts", [])
    counts: dict = {}
    for v in verdicts:
        counts.setdefault(f"{v['candidate']} vs {v['reference']}", {}).setdefault(v["verdict"], 0)
        counts[f"{v['candidate']} vs {v['reference']}"][v["verdict"]] += 1
    for pair, by in counts.items():
        print(f"  {pair}: " + ", ".join(f"{n} {k}" for k, n in sorted(by.items())))
    return 0


def _warm_parser(sub) -> None:
    w = sub.add_parser("warm-start", help="the warm-start equivalence study: configurations forked "
                       "from the learning curve's checkpoint against 1 worker, paired by seed "
                       "(resumable; into studies/warm_start.json)")
    _add_config_args(w)
    w.add_argument("--max-runs", type=int, help="stop after this many runs (continue later)")
    w.add_argument("--until-decided", type=int, default=0, metavar="K",
                   help="then add seeds (up to 10) until the first candidate decides K of its 8 "
                        "quantities")
    w.add_argument("--status", action="store_true", help="say how far the study is; run nothing")
    _verify_args(w, "1w, allreduce, local-sgd, warmup, bfloat16")
    w.add_argument("--allow-dirty", action="store_true", help="write into studies/ from a tree "
                   "with uncommitted changes (marked clean: false)")


def _cmd_warm(args: argparse.Namespace) -> int:
    from .convergence import warmstart

    cfg = _config(args)
    if args.verify_code:
        entry = warmstart.verify(cfg, args.verify_code, showers=args.showers,
                                 kinds=args.kinds.split(",") if args.kinds else None,
                                 allow_dirty=args.allow_dirty)
        _say_verified(entry, cfg.warm.output, "every run has this checkout's code version")
    elif not args.status:
        warmstart.run_warm(cfg, max_runs=args.max_runs, until_decided=args.until_decided,
                           allow_dirty=args.allow_dirty)
    state, res = warmstart.status(cfg), warmstart.load(cfg.warm.output)
    print(f"{cfg.warm.output}: {state['done']} of {state['planned']} runs done"
          + (f"; missing: {', '.join(state['missing'])}" if state["missing"] else "")
          + "".join(f"; {c} skipped (no bfloat16 here)" for c in state["skipped"]))
    for v in res.get("verdicts", []):
        print("  " + warmstart.describe(v))
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    console.stop_on_signals()
    from .io import check_output

    check_output(args.output, force=args.force)  # the path at once; its size once TF has loaded
    from .gan.simulate import simulate  # imports TensorFlow

    generator = args.generator
    if generator is None:
        from .gan import reference

        generator = reference.best()
        met = reference.info(reference.SHIPPED[generator])["final_monitors"]["targets_met"]
        print(f"generator: {generator}, the shipped one that met the most physics targets "
              f"({met} of 20 when exported); --generator chooses another")
    simulate(generator, args.n, args.output, energies=args.energies, batch=args.batch,
             seed=args.seed, precision=args.precision, strict=args.strict, force=args.force)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    console.stop_on_signals()
    from .io import check_output

    if not Path(args.source).exists():
        raise Gan3dError(f"{args.source}: no such training folder or checkpoint")
    if args.monitor_showers < 2:
        raise Gan3dError(f"--monitor-showers {args.monitor_showers}: give at least 2 showers "
                         "per energy (a spread needs two)")
    check_output(args.folder, folder=True, holds="reference.json", force=args.force)  # at once
    from .gan import reference  # imports TensorFlow
    meta = reference.export(args.source, Path(args.folder), note=args.note,
                            monitor_showers=args.monitor_showers, force=args.force)
    final = meta["final_monitors"]
    print(f"{args.folder}: epoch {meta['epoch']} ({meta['showers_seen']:,} showers), "
          f"{final['targets_met']} of {final['targets']} targets at {args.monitor_showers} "
          "showers per energy")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    cfg = _config(args, **{"train.workers": args.workers, "train.epochs": args.epochs,
                           "train.output": _recorded(args.output), "train.backend": args.backend,
                           "train.fork_from": _recorded(args.fork_from),
                           "train.lr_rule": args.lr_rule,
                           "train.lr_warmup_epochs": args.lr_warmup_epochs})
    jax = cfg.train.backend == "jax"
    if cfg.train.workers > 1 and not in_mpi_job():
        argv = [sys.executable, "-m", "gan3d", *sys.argv[1:]]
        if jax:  # process 0 hosts jax.distributed's coordinator on a port free now
            from .parallel.jaxdist import COORDINATOR_ENV, free_coordinator

            extra = ["-x", f"{COORDINATOR_ENV}={free_coordinator()}", "-x", "KERAS_BACKEND=jax"]
            launch(cfg.train.workers, argv, extra=extra)
        else:
            launch(cfg.train.workers, argv)
        return 0
    if jax:
        os.environ.setdefault("KERAS_BACKEND", "jax")  # before keras is first imported
    from .gan.training import train  # one loop; its backend imports TensorFlow or JAX when it runs

    if in_mpi_job():  # one rank of a job: any error ends the whole job at once
        guard(train, cfg, resume=args.resume, force=args.force)
    else:
        train(cfg, resume=args.resume, force=args.force)
    return 0


def _cmd_scale(args: argparse.Namespace) -> int:
    from .scaling.experiments import run

    workers = None
    if args.workers:
        try:
            workers = tuple(int(w) for w in args.workers.split(","))
        except ValueError:
            raise Gan3dError(f"--workers {args.workers!r}: give counts like 1,2,4") from None
    run(_config(args), workers=workers, mode=args.mode, output=args.output, network=args.network)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from .validation.study import metrics_table, validate

    labels = args.labels.split(",") if args.labels else [Path(c).name for c in args.checkpoints]
    result = validate(args.checkpoints, labels, _config(args, **{"validation.output": args.output}),
                      low_level=not args.no_low_level, force=args.force)
    print(metrics_table(result.metrics))
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    if args.data_command == "check":
        from .data.files import check_folder

        cfg = _config(args)
        report = check_folder(args.folder, theta_window=cfg.data.theta_window or None)
        for p in report.problems:
            print(f"problem: {p}")
        for n in report.notes:
            print(f"note: {n}")
        print(f"{len(report.problems)} problem(s) in {report.files} file(s) of {args.folder}; "
              f"{report.showers} showers read")
        return 1 if report.problems else 0
    from .data.generate import generate_dataset

    cfg = _config(args, **{"data.n_showers": args.n_showers, "data.n_files": args.files,
                           "data.seed": args.seed, "data.path": args.output})
    generate_dataset(cfg.data, progress=True, workers=args.workers)
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from .report import pipeline

    _bounded_interrupt("reproduce", pipeline.RUNNING)
    summary = pipeline.reproduce(args.profile, parse_overrides(args.overrides), force=args.force,
                                 only=args.only)
    return 0 if summary.ok else 1


def _bounded_interrupt(command: str, running: dict, grace: float = 30.0) -> None:
    """Ctrl-C ends ``gan3d command`` within ``grace`` seconds. The first SIGINT unwinds as usual
    (KeyboardInterrupt: the notebook's kernel is shut down, nothing is published); should that
    hang - a kernel or an MPI job that does not answer - a timer kills this process's children
    and exits with 130, saying so. ``running`` names the notebook being run, if any."""
    import signal
    import threading

    def force() -> None:
        import psutil

        for child in psutil.Process().children(recursive=True):
            try:
                child.kill()
            except psutil.Error:
                pass
        notebook = running.get("notebook", "the notebook")
        print(f"{notebook} interrupted: none of its figures was published, and the next run "
              f"redoes it (stopping took over {grace:g} s: its processes were killed)\n"
              f"gan3d {command}: interrupted", file=sys.stderr, flush=True)
        os._exit(130)

    def on_sigint(signum, frame):
        running["interrupted"] = True  # whatever ends the notebook now, it was the interrupt
        if not timer.is_alive():
            timer.start()
        raise KeyboardInterrupt

    timer = threading.Timer(grace, force)
    timer.daemon = True
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, on_sigint)


def _cmd_lab(args: argparse.Namespace) -> int:
    from .lab import lab_command

    apply_process_defaults()
    cmd = lab_command(args.lab_args)
    os.execv(cmd[0], cmd)
    return 0  # pragma: no cover - execv does not return


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import report

    return report()


COMMANDS = {"doctor": _cmd_doctor, "data": _cmd_data, "train": _cmd_train, "scale": _cmd_scale,
            "validate": _cmd_validate, "study": _cmd_study, "warm-start": _cmd_warm,
            "simulate": _cmd_simulate, "export": _cmd_export, "reproduce": _cmd_reproduce,
            "lab": _cmd_lab}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "lab":
        parser.error("unrecognized arguments: " + " ".join(extra))
    args.lab_args = extra
    apply_process_defaults()  # before TensorFlow is imported: quiet logs, oneDNN, MPI settings
    try:
        return COMMANDS[args.command](args)
    except Gan3dError as exc:
        print(f"gan3d {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", 2)  # Ctrl-C is SIGINT
        print(f"gan3d {args.command}: interrupted" + (f" by signal {signum}" if signum != 2
                                                      else ""), file=sys.stderr)
        return 128 + signum
