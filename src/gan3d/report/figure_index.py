"""``figures/README.md``: the index from each figure to what of the paper it reproduces.

Each row: the figure, the paper's figure or section it reproduces (or that it extends the
paper), the notebook and parameters that made it, the generators it draws with the showers each
was trained on (a figure of a generator trained on 576 showers reads differently from one of a
generator trained on 40,000), the date and the hash of the code that made it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import console
from ..exceptions import CheckpointError
from ..io import atomic_path, repo_root

__all__ = ["FIGURE_MAP", "paper_figure", "shown", "training_budgets", "write_index"]

log = console.get_logger(__name__)

# Which paper figure each output reproduces, by file-name prefix (most specific first).
FIGURE_MAP = (
    ("fig1_", "Fig. 1 - node fabric (paper's IBM S822LC / this machine)"),
    ("fig2_", "Fig. 2 - where a step's time goes; is training compute-bound?"),
    ("fig3_", "Fig. 3 - speed-up and scaling efficiency against workers"),
    ("scaling_overall", "Sect. 6 - overall time with test-loss evaluation (9.07x at 12 GPUs)"),
    ("scaling_network_projection",
     "Sect. 7 - the 3DGAN step per emulated network (measured) and where each network stops "
     "scaling (model)"),
    ("scaling_network", "Sect. 7 - all-reduce over emulated networks, measured and modelled"),
    ("scaling_allreduce_algorithms",
     "Sect. 7 - other all-reduce methods: MPI algorithms and hierarchy, measured and modelled"),
    ("scaling_roofline", "extends Fig. 2 - the step layer by layer against this machine's roofline"),
    ("scaling_", "extends Fig. 3 - performance model and projections"),
    ("training_learning_curve",
     "extends - physics monitors of the shipped reference generator against the showers it saw"),
    ("training_showers_reference",
     "extends - the shipped reference generator's showers (training budget in the panel titles)"),
    ("training_warm_start",
     "Sect. 6 - the paper's claim from a warm start (41,600 showers): 2 workers with lr x 2 and "
     "other configurations against 1 worker, paired by seed (committed study)"),
    ("training_convergence",
     "Sect. 6 - the paper's claim with error bars: 1 vs N workers over seeds, equivalence tests "
     "(committed study, 1,024 showers per run)"),
    ("training_sync_frequency",
     "extends - local SGD: model averaging every k steps, communication saved against "
     "convergence (committed study)"),
    ("training_lr_rules", "extends - learning-rate rules for larger global batches (committed study)"),
    ("training_", "Sect. 6 - convergence of 1 vs N workers (text claim, no figure in the paper)"),
    ("validation_long_runs",
     "Sect. 6 - the paper's claim at a physics budget: the 1- and 2-worker long runs' learning "
     "curves, validated beside the other generators"),
    ("data_", "extends - the training data (no figure in the paper)"),
    ("validation_", "extends - physics validation as in 3DGAN's own papers"),
    ("concepts_", "teaches - ring all-reduce, data parallelism, lr scaling, Amdahl (Sect. 4-6)"),
)


def paper_figure(name: str) -> str:
    for prefix, text in FIGURE_MAP:
        if name.startswith(prefix):
            return text
    return "extends"


def _showers_seen(run_dir: Path) -> int | None:
    """Showers a training run's generator saw: the last epoch of its history."""
    history = Path(run_dir) / "history.jsonl"
    if not history.is_file():
        return None
    seen = None
    for line in history.read_text().splitlines():
        try:
            seen = json.loads(line).get("showers_seen", seen)
        except json.JSONDecodeError:
            continue
    return int(seen) if seen is not None else None


def training_budgets(step_name: str, results: Path) -> str:
    """The generators a notebook shows and the showers each was trained on, for the index.

    Notebooks 02 and 04 draw showers of the quick-trained generators next to the shipped
    reference generator; their figures are read very differently after 576 showers of training
    than after 40,000, so the index says which budget each figure shows. Empty for the others.
    """
    if step_name not in ("training", "validation"):
        return ""
    from ..gan import reference  # the shipped generator's provenance (package data)

    parts = []
    train_dir = results / "training"
    runs = sorted(train_dir.glob("train_*w"), key=lambda p: int(p.name[6:-1]) if p.name[6:-1].isdigit() else 0)
    for run_dir in runs:
        seen = _showers_seen(run_dir)
        if seen is not None:
            n = run_dir.name[6:-1]
            parts.append(f"{n} worker{'s' if n != '1' else ''}: {seen:,} showers")
    try:
        parts.append(f"reference generator: {reference.info()['showers_seen']:,} showers")
    except CheckpointError as exc:  # an installation without the package data still writes its index
        log.warning("reference generator's provenance unreadable (%s)", exc)
    return "; ".join(parts)


def shown(value: Any) -> Any:
    """A parameter as the index shows it: paths inside the project relative to its root, so the
    index reads the same on every machine."""
    if isinstance(value, (list, tuple)):
        return [shown(v) for v in value]
    if isinstance(value, str) and value.startswith("/"):
        try:
            return str(Path(value).relative_to(repo_root()))
        except ValueError:
            return value
    return value


def shows_generators(name: str) -> bool:
    """Whether a figure draws what trained generators made (their budget then matters)."""
    study = ("training_convergence", "training_sync_frequency", "training_lr_rules")
    return (name.startswith(("training_", "validation_")) and not name.startswith(study)
            and name not in ("training_epoch_times.png", "validation_speed.png"))


def row_cells(line: str) -> list[str]:
    """The cells of one row of a Markdown table, however it is padded (its pipes split it
    unless escaped)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def seven_cells(cells: Sequence[str]) -> list[str]:
    """The cells of a row of an index written before the budget column, given an empty one."""
    cells = list(cells)
    if len(cells) == 6:
        cells.insert(4, "")
    return cells


def index_rows(path: Path) -> dict[str, list[list[str]]]:
    """The figure rows of an existing index, as cells, by notebook."""
    rows: dict[str, list[list[str]]] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            cells = row_cells(line)
            if line.startswith("| [") and len(cells) > 2:
                rows.setdefault(cells[2], []).append(cells)
    return rows


def write_index(figures: Path, state: Mapping[str, Any], steps: Sequence) -> None:
    """figures/README.md: each figure -> paper figure, notebook, parameters, date, code hash.

    The index is committed with the figures, so it cannot name its own commit (the tree is dirty
    while it is written): it records the hash of the package's code that made each figure. Rows
    of notebooks this results folder has not run (``--only``, a fresh clone) are kept as they were.
    """
    old = index_rows(figures / "README.md")
    lines = ["# Figures", "",
             "Regenerated by `gan3d reproduce` (`make figures`). Each row: the figure, what of the",
             "paper it reproduces or extends, the notebook run that made it and, for figures that",
             "draw trained generators, how many showers each was trained on. What each figure",
             "draws (its panels, series' labels and values) is in `data/`: `data/X.json` for `X.png`.", ""]
    rows = []
    for step in steps:
        entry = state.get(step.notebook)
        if not entry:
            rows += [seven_cells(cells) for cells in old.get(step.notebook, [])
                     if (figures / cells[0].split("](")[0][1:]).is_file()]
            continue
        params = {k: v for k, v in entry["parameters"].items() if k not in ("figures_dir", "results_dir")}
        ptext = ", ".join(f"{k}={shown(v)}" for k, v in params.items()).replace("|", "/")
        for name in entry["figures"]:
            budget = entry.get("budget", "") if shows_generators(name) else ""
            rows.append([f"[{name}]({name})", paper_figure(name), step.notebook, ptext, budget,
                         entry["finished_utc"], f"`{entry.get('code', '?')[:12]}`"])
    lines += [console.table(rows, ["figure", "reproduces", "notebook", "parameters",
                                   "generators (training budget)", "made (UTC)", "code"]),
              "", "Code: the first 12 hex digits of the SHA-256 of the package's code and data "
              "files (`src/gan3d`: .py, .yaml, .mplstyle, .json) when the figure was made, the hash "
              "the pipeline keys its runs on. The index cannot name the commit that holds it: the "
              "tree is dirty while it is written (`git log -- figures/` tells)."]
    with atomic_path(figures / "README.md") as tmp:
        tmp.write_text("\n".join(lines) + "\n")
