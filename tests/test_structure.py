"""The package's structure, read from its source: no import cycle, layers respected (no science
room imports the report), at most 8 modules at the top level, every Horovod and MPI import in
``gan3d.parallel``, each rule defined once, and the table of modules in ``docs/layout.md`` equal to
the tree. Imports inside functions count like any other."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "gan3d"
README = Path(__file__).resolve().parents[1] / "README.md"
LAYOUT = README.parent / "docs" / "layout.md"  # the table of modules, one line each


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module and package of gan3d."""
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, int, str]]:
    """(imported module, line, raw name) for every import in ``path``, at any depth."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for a in node.names:
                sub = f"{module}.{a.name}"
                found.append((sub if sub in MODULES else module, node.lineno, module))
    return found


def _graph() -> dict[str, set[str]]:
    return {name: {m for m, _, _ in _imports(name, path) if m in MODULES and m != name}
            for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_cycle_detection_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_import_graph_has_no_cycle():
    graph = _graph()
    assert sum(map(len, graph.values())) > 100  # the walk sees the package's real imports
    assert _cycles(graph) == []


# What every room may import. parallel/runtime.py (process settings for MPI and TensorFlow: the
# cores a process may use, its threads) lives with the launchers it serves, but io, config, data
# and the trainings read it too: it imports nothing of gan3d but the exceptions.
FOUNDATION = {"gan3d", "gan3d.exceptions", "gan3d.config", "gan3d.io", "gan3d.records",
              "gan3d.parallel.runtime", "gan3d.console"}
# Which rooms a room may import from (besides itself and the foundation).
LAYERS = {
    "data": set(),
    "parallel": set(),
    "gan": {"data", "parallel"},
    "validation": {"data", "gan"},
    "scaling": {"data", "parallel", "gan"},
    "plots": {"data", "scaling", "validation", "convergence"},
    "convergence": {"data", "parallel", "gan", "scaling", "validation"},
    # The repository's report (figures, their index, the claims ledger) reads what every room
    # measured; no room imports it.
    "report": {"data", "parallel", "gan", "validation", "scaling", "plots", "convergence"},
}
# Deliberate exceptions, with the reason.
ALLOWED = {
    # A launcher of training on ipyparallel engines: it runs gan.training on the engines.
    ("gan3d.parallel.cluster", "gan3d.gan.training"),
    # The job runner on mpirun ranks: its train tasks run gan.training in each rank (the probes
    # of scaling it names by "module:function" and imports only in the ranks that run them).
    ("gan3d.parallel.jobs", "gan3d.gan.training"),
    # Training reports the physics monitors of its generator every epoch (pure NumPy, no gan).
    ("gan3d.gan.training", "gan3d.validation.monitors"),
    # The shipped reference generator carries its monitors (measured again when exported).
    ("gan3d.gan.reference", "gan3d.validation.monitors"),
}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or module in {f"gan3d.{r}" for r in LAYERS} else "top"


def test_rooms_import_only_the_rooms_below_them():
    wrong = []
    for name, targets in _graph().items():
        room = _room(name)
        if name in FOUNDATION:
            wrong += [(name, t) for t in targets if t not in FOUNDATION]
        elif room in LAYERS:
            ok = LAYERS[room] | {room}
            wrong += [(name, t) for t in targets if t not in FOUNDATION and _room(t) not in ok
                      and (name, t) not in ALLOWED]
    assert wrong == []


SCIENCE = ("data", "parallel", "gan", "validation", "scaling", "plots", "convergence")


def test_no_science_room_or_foundation_module_imports_the_report():
    """The report (figures, their index, the claims ledger) is built from the science; nothing
    the science needs may come from it."""
    graph = _graph()
    assert any(_room(t) in SCIENCE for name, targets in graph.items() if _room(name) == "report"
               for t in targets)  # the walk sees the report reading the science
    wrong = [(name, t) for name, targets in graph.items()
             if _room(name) in SCIENCE or name in FOUNDATION
             for t in targets if t == "gan3d.report" or t.startswith("gan3d.report.")]
    assert wrong == []


def test_the_top_level_holds_at_most_8_modules():
    """Besides ``__init__`` and ``__main__``: the rest lives in a room named for what it does."""
    top = sorted(p.name for p in SRC.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(top) <= 8, top


def _code_lines(notebook: Path) -> int:
    """Lines of code in a notebook's code cells: neither blank nor only a comment."""
    cells = json.loads(notebook.read_text())["cells"]
    return sum(1 for c in cells if c["cell_type"] == "code"
               for line in "".join(c["source"]).splitlines()
               if line.strip() and not line.lstrip().startswith("#"))


def test_notebooks_01_to_04_are_thin():
    """At most 120 lines of code each (the lesson, 05, keeps its exercises), and no markdown table
    assembled in a notebook: tables come from the package's one table helper."""
    notebooks = sorted((README.parent / "notebooks").glob("0[1-4]_*.ipynb"))
    assert len(notebooks) == 4
    assert {nb.name: _code_lines(nb) for nb in notebooks if _code_lines(nb) > 120} == {}
    built = [nb.name for nb in notebooks for c in json.loads(nb.read_text())["cells"]
             if c["cell_type"] == "code" and "|---" in "".join(c["source"])]
    assert built == []


def test_horovod_and_mpi4py_are_imported_in_parallel_only_and_marked():
    seen = []
    for name, path in MODULES.items():
        lines = path.read_text().splitlines()
        for module, lineno, raw in _imports(name, path):
            if raw.split(".")[0] in ("horovod", "mpi4py"):
                seen.append(name)
                assert name == "gan3d.parallel.distributed", f"{name}:{lineno} imports {raw}"
                assert "# DISTRIBUTED" in lines[lineno - 1], f"{name}:{lineno} is not marked"
    assert len(seen) >= 3  # horovod, mpi4py and mpi4py.MPI


# Calls that talk to other ranks (parallel/distributed.py's rule: each line is marked DISTRIBUTED).
COLLECTIVES = {"allreduce", "average", "broadcast", "broadcast_object", "broadcast_variables",
               "broadcast_arrays", "broadcast_one_to_all", "broadcast_state", "average_state",
               "average_batch_statistics", "allgather", "grouped_allreduce", "process_allgather",
               "barrier", "mpi_barrier", "mpi_allreduce_sum", "mpi_max", "mpi_rank", "mpi_size",
               "Allreduce", "Barrier", "sync_global_devices", "gloo_rendezvous", "collective",
               "pmean"}
# Starting the world talks to the others too; these names are checked on the collectives' owners.
STARTS = {"init", "init_jax", "initialize", "join"}
OWNERS = {"distributed", "mpi", "hvd", "_hvd()", "_jaxdist()", "jax.distributed"}


def _unmarked(source: str) -> tuple[int, list[tuple[int, str]]]:
    """(calls that talk to other ranks, those whose lines carry no DISTRIBUTED mark)."""
    lines, seen, wrong = source.splitlines(), 0, []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        if not (name in COLLECTIVES or name in STARTS and isinstance(f, ast.Attribute)
                and ast.unparse(f.value) in OWNERS):
            continue
        seen += 1
        if not any("DISTRIBUTED" in line for line in lines[node.lineno - 1:node.end_lineno]):
            wrong.append((node.lineno, lines[node.lineno - 1].strip()))
    return seen, wrong


def test_an_unmarked_collective_is_found():
    code = ("world = distributed.init()  # DISTRIBUTED\nx = distributed.allreduce(\n    y)\n"
            "mpi.mpi_barrier()\nnp.broadcast_to(a, b)\nfoo.init()\n")
    assert _unmarked(code) == (3, [(2, "x = distributed.allreduce("), (4, "mpi.mpi_barrier()")])


def test_every_line_that_talks_to_other_ranks_is_marked():
    seen, wrong = 0, []
    for name, path in MODULES.items():
        n, bad = _unmarked(path.read_text())
        seen += n
        wrong += [f"{name}:{lineno}: {text}" for lineno, text in bad]
    assert seen > 50  # the walk sees the package's collectives
    assert wrong == []


def test_doctor_asks_parallel_for_the_builds():
    graph = _graph()
    assert "gan3d.parallel.distributed" in graph["gan3d.doctor"]


def _constants(path: Path) -> list[tuple[object, int]]:
    tree = ast.parse(path.read_text())
    out = [(n.value, n.lineno) for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    out += [(tuple(ast.literal_eval(n)), n.lineno) for n in ast.walk(tree)
            if isinstance(n, ast.Tuple) and len(n.elts) == 5
            and all(isinstance(e, (ast.Constant, ast.UnaryOp)) for e in n.elts)]
    return out


@pytest.mark.parametrize("value, allowed", [
    (2e-4, {"gan3d.data.calorimeter"}),  # the hit threshold
    # the cell threshold; metrics clips probabilities, timeline converts microseconds, checks
    # and files use it as the relative tolerance of "all values equal", netns as EDR's 1 us
    (1e-6, {"gan3d.data.calorimeter", "gan3d.validation.metrics", "gan3d.scaling.timeline",
            "gan3d.data.checks", "gan3d.data.files", "gan3d.parallel.netns"}),
    ((0.0018, -0.023, 0.11, -0.28, 2.21), {"gan3d.data.calorimeter"}),  # the published fit
    (5.1, {"gan3d.data.calorimeter"}),  # the cell pitch (mm)
])
def test_each_calorimeter_constant_is_written_once(value, allowed):
    where = {name for name, path in MODULES.items() for v, _ in _constants(path) if v == value}
    assert where and where <= allowed


def test_shard_bounds_are_computed_in_one_place():
    pattern = re.compile(r"\(?\w+\s*\+\s*1\)?\s*\*\s*\w+\s*//\s*\w+|rank\s*\*\s*\w+\s*//")
    where = {name for name, path in MODULES.items() if pattern.search(path.read_text())}
    assert where == {"gan3d.data.sharding"}


def test_layout_table_lists_exactly_the_modules():
    section = LAYOUT.read_text()  # docs/layout.md, linked from the README
    assert "docs/layout.md" in README.read_text()
    listed = set(re.findall(r"^\| `([\w/]+\.py)` \|", section, flags=re.M))
    files = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if p.name != "__main__.py"}
    assert listed == files
    for pkg in ("parallel", "data", "gan", "scaling", "validation", "plots", "convergence",
                "report"):
        assert f"`{pkg}/`" in section


TESTS = Path(__file__).resolve().parent
COVERAGE = README.parent / "docs" / "tests.md"


def _reached(path: Path) -> set[str]:
    """The gan3d modules a test file (or notebook) names: imports at any depth, ``from gan3d.x
    import y`` as ``gan3d.x.y``, and dotted names in strings (``python -m``, kernel code); with
    those of the ``tests/`` scripts and notebooks it names."""
    text = path.read_text()
    for name in re.findall(r"([\w]+\.(?:py|ipynb))\b", text):
        for found in (*TESTS.rglob(name), *(README.parent / "notebooks").glob(name)):
            if found != path and found.suffix in (".py", ".ipynb"):
                text += found.read_text()
    text = text.replace('\\n', '\n').replace('\\"', '"')  # notebooks: JSON strings
    out = set(re.findall(r"gan3d(?:\.\w+)+", text))
    for module, names in re.findall(r"from (gan3d[\w.]*) import \(?([\w, ]+)", text):
        out |= {f"{module}.{n.split(' as ')[0].strip()}" for n in names.split(",") if n.strip()}
    return out


def _dotted(rel: str) -> str:
    return "gan3d." + rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def test_every_module_without_a_test_file_of_its_name_names_the_test_that_covers_it():
    rows = {m: (re.findall(r"`(test_\w+\.py)`", tests), re.findall(r"through `([\w/.]+)`", how))
            for m, tests, how in re.findall(r"^\| `([\w/]+\.py)` \| (.+?) \|(.*)\|$",
                                            COVERAGE.read_text(), flags=re.M)}
    assert "docs/tests.md" in README.read_text()  # linked from the README
    files = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if p.name != "__main__.py"}
    without = {f for f in files if Path(f).name != "__init__.py"
               and not (TESTS / f"test_{Path(f).stem}.py").is_file()}
    assert without - set(rows) == set()  # every module without its own test file is listed
    graph, wrong = _graph(), []
    for module, (tests, through) in rows.items():
        assert module in files and tests, module
        for via in through:  # the module (or notebook) in between imports or runs it
            if via.endswith(".py"):
                ok = _dotted(module) in graph[_dotted(via)] | _reached(SRC / via)  # python -m
            else:
                ok = _dotted(module) in _reached(README.parent / via)
            if not ok:
                wrong.append(f"{via} does not use {module}")
        targets = {_dotted(v) for v in through if v.endswith(".py")} or {_dotted(module)}
        for test in tests:
            reached = _reached(TESTS / test)
            if not targets & reached:
                wrong.append(f"{test} reaches none of {sorted(targets)}")
    assert wrong == []

