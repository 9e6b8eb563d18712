"""Every measured number the README and ``docs/`` quote, as data, and the check that it is current.

A page marks each measured number it quotes, and the text between the marks is rendered from a
committed JSON file, never typed::

    2 ranks train <!--q:train.amx.float32.2x1-->7.0 showers/s (median of 3 repeats; range
    6.95-7.26)<!--/q--> in float32

:data:`QUOTES` holds, for each id, the file the number comes from (``studies/*.json``,
``figures/data/*.json``), how it is computed from it, the statistic's name (``{n}`` is the number
of repeats), the unit and the significant digits; the machine and the date are read from the
file's provenance (:func:`machine`). :func:`render_quote` gives the text a marker must hold: the
value, what statistic it is and its spread over the repeats. :func:`check` lists every marker of
a page whose text differs (a number edited by hand, or a JSON file that changed), :func:`render`
rewrites the marked texts in place, atomically. :func:`unmarked` finds numbers that look measured
(a %, a ratio like 1.5x, showers/s, a time) outside the markers, code and :data:`NOT_MEASURED`,
the short list of the paper's numbers and of settings, each with its reason::

    python tools/pages quotes README.md docs/*.md            # check; exit 1 if anything is stale
    python tools/pages quotes --write README.md docs/*.md    # rewrite the marked texts
    python tools/pages quotes --list                         # every quote: value, file, machine

Medians of three repeats are quoted with two significant digits (a third digit would be noise);
the spread gives the repeats themselves one digit more.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from gan3d.exceptions import StudyFileError
from gan3d.io import atomic_path, read_json, repo_root

from .prose import NOT_MEASURED, Suspect, unmarked

__all__ = ["Quote", "QUOTES", "NOT_MEASURED", "Stale", "Suspect", "render_quote", "value_text",
           "machine", "check", "render", "unmarked", "main"]

Data = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Quote:
    """One measured number as quoted: where it comes from and how it is written."""

    id: str
    source: str                      # the JSON file, relative to the repository root
    value: Callable[[Data], float]   # the quoted number, computed from the loaded file
    statistic: str                   # what the value is; "{n}" is the number of samples
    unit: str                        # " %", "x", " showers/s"
    samples: Callable[[Data], Sequence[float]] | None = None  # the repeats: the spread
    spread: str = "range"            # the name of the spread of the samples
    digits: int = 2                  # significant digits of the value
    scale: float = 1.0               # 100 for a percentage


# -- how the numbers are taken from the benchmarks' files ------------------------------------

def _batch(d: Data, precision: str, batch: int = 32) -> Data:
    """bench_training.py --batches: the row of one precision and per-rank batch."""
    return next(r for r in d["precisions"][precision] if r["batch_per_rank"] == batch)


def _rates(row: Data, ranks: int, threads: int = 1) -> list[float]:
    """showers/s of each repeat of one configuration (ranks x threads) of a batch row."""
    run = next(r for r in row["runs"] if r["ranks"] == ranks and r["threads"] == threads)
    return [rep["showers_per_s"] for rep in run["repeats"]]


def _throughput(qid: str, source: str, precision: str) -> Quote:
    """2 ranks x 1 thread at per-rank batch 32: the median over the interleaved repeats."""
    return Quote(qid, source, lambda d: statistics.median(_rates(_batch(d, precision), 2)),
                 "median of {n} repeats", " showers/s",
                 samples=lambda d: _rates(_batch(d, precision), 2))


def _efficiency(qid: str, source: str, precision: str) -> Quote:
    """2-rank scaling efficiency: 2 ranks' showers/s over twice 1 rank x 1 thread's."""
    def value(d: Data) -> float:
        row = _batch(d, precision)
        return statistics.median(_rates(row, 2)) / (2 * statistics.median(_rates(row, 1)))
    return Quote(qid, source, value, "ratio of median throughputs, {n} repeats", " %",
                 samples=lambda d: _batch(d, precision)["scaling_efficiency_per_repeat"],
                 spread="per repeat", scale=100.0)


def _precision_ratio(d: Data) -> float:
    return (statistics.median(_rates(_batch(d, "bfloat16"), 2))
            / statistics.median(_rates(_batch(d, "float32"), 2)))


def _precision_ratios(d: Data) -> list[float]:  # the precisions are interleaved in each repeat
    return [b / f for b, f in zip(_rates(_batch(d, "bfloat16"), 2), _rates(_batch(d, "float32"), 2))]


_WARM = "studies/warm_start.json"


def _warm_rates(d: Data, config: str) -> list[float]:
    """gan3d warm-start: each run's median showers/s (of its epochs), by seed, of the runs made
    on the AMD EPYC (each run records its CPU)."""
    runs = sorted(d["runs"].values(), key=lambda r: r["seed"])
    return [r["showers_per_s"] for r in runs
            if r["config_id"] == config and r["machine"].startswith("AMD EPYC")]


def _warm_ratios(d: Data) -> list[float]:  # bfloat16 over float32 (1 worker), seed by seed
    runs = d["runs"]
    return [r["showers_per_s"] / runs[f"1w-s{r['seed']}"]["showers_per_s"] for r in
            sorted(runs.values(), key=lambda r: r["seed"]) if r["config_id"] == "1w-bf16"
            and r["machine"] == runs[f"1w-s{r['seed']}"]["machine"]]


def _speedup(qid: str, source: str, precision: str, config: str) -> Quote:
    """bench_training.py --against: this code's showers/s over the reference code's."""
    def row(d: Data) -> Data:
        return next(r for r in d["rows"] if r["precision"] == precision and r["config"] == config)

    def value(d: Data) -> float:
        rates = row(d)["showers_per_s"]
        return rates["this"] / rates["reference"]
    return Quote(qid, source, value, "ratio of median throughputs, {n} repeats", "x",
                 samples=lambda d: row(d)["speedup_per_repeat"], spread="per repeat")


def _inference(qid: str, source: str, precision: str, batch: int) -> Quote:
    """bench_inference.py: the folded generator (gan3d simulate), showers/s over the runs."""
    def runs(d: Data) -> list[float]:
        return next(r for r in d["rows"] if r["source"] == "GAN, folded"
                    and r["precision"] == precision and r["batch_size"] == batch)["runs"]
    return Quote(qid, source, lambda d: statistics.median(runs(d)), "median of {n} runs",
                 " showers/s", samples=runs)


_AMX, _EPYC = "studies/training_batches_amx.json", "studies/training_batches.json"
_PREC = "studies/precision.json"


_ACC = "studies/bfloat16_accuracy.json"


def _acc(d: Data) -> Data:  # bench/bfloat16_accuracy.py, as oneDNN runs on the CPU that has AMX
    return d["runs"]["as oneDNN runs here"]


def _tost(d: Data, name: str) -> Data:
    """bench_precision.py: bfloat16 against float32, the equivalence test of one quantity."""
    return d["comparison"]["tost"][name]
_AGAINST, _FAST = "studies/training_against_amx.json", "studies/training_cpu_layers_amx.json"

QUOTES: dict[str, Quote] = {q.id: q for q in (
    _throughput("train.amx.float32.2x1", _AMX, "float32"),
    _throughput("train.amx.bfloat16.2x1", _AMX, "bfloat16"),
    Quote("train.amx.bfloat16_over_float32", _AMX, _precision_ratio,
          "ratio of median throughputs, {n} repeats", "x", samples=_precision_ratios,
          spread="per repeat"),
    _efficiency("train.amx.float32.efficiency", _AMX, "float32"),
    _efficiency("train.amx.bfloat16.efficiency", _AMX, "bfloat16"),
    _throughput("train.epyc.float32.2x1", _EPYC, "float32"),
    _efficiency("train.epyc.float32.efficiency", _EPYC, "float32"),
    _speedup("cpu_layers.bfloat16.1x2", _AGAINST, "bfloat16", "1x2"),
    _speedup("cpu_layers.bfloat16.2x1", _AGAINST, "bfloat16", "2x1"),
    _speedup("cpu_layers.float32.1x2", _AGAINST, "float32", "1x2"),
    _speedup("cpu_layers.float32.2x1", _AGAINST, "float32", "2x1"),
    _speedup("cpu_layers_fast.float32.1x2", _FAST, "float32", "1x2"),
    _speedup("cpu_layers_fast.float32.2x1", _FAST, "float32", "2x1"),
    _inference("inference.amx.bfloat16.b64", "studies/inference_amx.json", "bfloat16", 64),
    _inference("inference.amx.float32.b64", "studies/inference_amx.json", "float32", 64),
    _inference("inference.epyc.float32.b64", "studies/inference.json", "float32", 64),
    Quote("precision.profile_distance.diff", _PREC, lambda d: _tost(d, "profile_distance")["diff"],
          "bfloat16 less float32, means of 6 seeds each", ""),
    Quote("precision.profile_distance.low", _PREC, lambda d: _tost(d, "profile_distance")["low"],
          "lower end of the difference's 90 % interval", "", digits=1),
    Quote("precision.profile_distance.high", _PREC, lambda d: _tost(d, "profile_distance")["high"],
          "upper end of the difference's 90 % interval", "", digits=2),
    Quote("precision.targets_met.bfloat16", _PREC, lambda d: _tost(d, "mon_targets_met")["mean"],
          "of 20, mean over 6 seeds", ""),
    Quote("precision.targets_met.float32", _PREC,
          lambda d: _tost(d, "mon_targets_met")["ref_mean"], "of 20, mean over 6 seeds", ""),
    *(Quote(f"warm.epyc.{p}.1w", _WARM, lambda d, c=c: statistics.median(_warm_rates(d, c)),
            "median of {n} runs", " showers/s", samples=lambda d, c=c: _warm_rates(d, c))
      for p, c in (("bfloat16", "1w-bf16"), ("float32", "1w"))),
    Quote("warm.epyc.bfloat16_over_float32", _WARM,
          lambda d: statistics.median(_warm_ratios(d)), "median of {n} runs' ratios to the float32 run of their seed", "x",
          samples=_warm_ratios, spread="per seed"),
    Quote("amx.conv1.error", _ACC, lambda d: _acc(d)["convolutions"]["generator conv1"]["forward"],
          "relative error of its forward pass in bfloat16 against float32", " %", scale=100),
    Quote("amx.others.error", _ACC, lambda d: max(
        e for name, c in _acc(d)["convolutions"].items() for k, e in c.items()
        if (name, k) != ("generator conv1", "forward")),
          "the largest relative error of the other passes, forward and backward", " %", scale=100),
    Quote("amx.showers.energy_before", _ACC,
          lambda d: _acc(d)["showers"]["training, conv1 bfloat16"]["energy_ratio"],
          "of float32's energy, conv1 in bfloat16, 8 showers", " %", scale=100),
    Quote("amx.showers.error_after", _ACC, lambda d: max(
        _acc(d)["showers"][f"{n}, conv1 package"]["error"] for n in ("training", "folded")),
          "relative error against float32, conv1 in float32, 8 showers", " %", scale=100),
    Quote("inference.flops_ratio", "studies/inference.json",
          lambda d: d["generator_forward_flops"] / d["folded_forward_flops"],
          "ratio of the forward FLOPs counted", "x"),
)}

# -- rendering -------------------------------------------------------------------------------

def _decimals(x: float, digits: int) -> int:
    """Decimals that show ``x`` with ``digits`` significant digits (negative: round tens...)."""
    return digits - 1 - (math.floor(math.log10(abs(x))) if x else 0)


def _number(x: float, decimals: int) -> str:
    x = round(x, decimals)
    return f"{x:,.{max(decimals, 0)}f}"


def _load(source: str, root: Path, cache: dict[str, Data], reader: str) -> Data:
    """The JSON file ``source`` (relative to ``root``), read once per ``cache``; ``reader`` names
    the quote or block that reads it, for the error."""
    if source not in cache:
        path = root / source
        if not path.is_file():
            raise StudyFileError(f"{reader}: its source {source} is missing under {root}; "
                                 f"restore the file or remove the {reader.split()[0]}")
        cache[source] = read_json(path)
    return cache[source]


def _numbers(quote: Quote, root: Path, cache: dict[str, Data]) -> tuple[float, list[float]]:
    data = _load(quote.source, root, cache, f"quote {quote.id!r}")
    try:
        value = quote.value(data)
        samples = list(quote.samples(data)) if quote.samples else []
    except (KeyError, IndexError, TypeError, StopIteration, ZeroDivisionError) as exc:
        raise StudyFileError(f"quote {quote.id!r}: {quote.source} does not hold what the quote "
                             f"reads ({type(exc).__name__}: {exc}); the file's layout changed, "
                             f"update the quote in tools/pages/quotes.py") from None
    return value * quote.scale, [s * quote.scale for s in samples]


def value_text(quote: Quote, root: Path | None = None,
               cache: dict[str, Data] | None = None) -> str:
    """The quoted number with its unit alone: ``95 %``."""
    value, _ = _numbers(quote, Path(root or repo_root()), {} if cache is None else cache)
    return _number(value, _decimals(value, quote.digits)) + quote.unit


def render_quote(quote: Quote, root: Path | None = None,
                 cache: dict[str, Data] | None = None) -> str:
    """The text a marker of ``quote`` holds: value, statistic and spread over the repeats,
    e.g. ``95 % (ratio of median throughputs, 3 repeats; per repeat 93.9-100.0 %)``."""
    root, cache = Path(root or repo_root()), {} if cache is None else cache
    value, samples = _numbers(quote, root, cache)
    decimals = _decimals(value, quote.digits)
    text = _number(value, decimals) + quote.unit
    if not samples:
        return f"{text} ({quote.statistic})"
    lo, hi = min(samples), max(samples)
    places = max(_decimals(lo, quote.digits + 1), 0)  # the repeats: one digit more
    lo, hi = _number(lo, places), _number(hi, places)
    unit = quote.unit if quote.unit.strip() in ("%", "x") else ""
    return f"{text} ({quote.statistic.format(n=len(samples))}; {quote.spread} {lo}-{hi}{unit})"


def machine(quote: Quote, root: Path | None = None, cache: dict[str, Data] | None = None) -> str:
    """Where and when ``quote`` was measured, from its file's provenance."""
    data = _load(quote.source, Path(root or repo_root()), {} if cache is None else cache,
                 f"quote {quote.id!r}")
    prov = data.get("provenance") or {}
    m = prov.get("machine") or {}
    text = f"{m.get('cores', '?')}-core {m.get('cpu') or m.get('processor') or 'unknown CPU'}"
    own = data.get("machine") if isinstance(data.get("machine"), dict) else {}  # gan3d study's
    bf16 = m.get("bfloat16", own.get("bfloat16", data.get("cpu_has_bf16", prov.get("cpu_bf16"))))
    if bf16 is not None:
        text += ", bfloat16 arithmetic" if bf16 else ", no bfloat16 arithmetic"
    if prov.get("time_utc"):
        text += f", {prov['time_utc'][:10]}"
    return text


def _sources(root: Path, cache: dict[str, Data]) -> str:
    """The block ``<!--q:sources-->``: every quote with its value, file and machine."""
    rows = ["", "", "| quote | value | statistic | file | machine, date |", "|---|---|---|---|---|"]
    for q in QUOTES.values():
        _, samples = _numbers(q, root, cache)
        rows.append(f"| `{q.id}` | {value_text(q, root, cache)} | {q.statistic.format(n=len(samples))}"
                    f" | `{q.source}` | {machine(q, root, cache)} |")
    return "\n".join(rows) + "\n\n"


def _warm_blocks(root: Path, cache: dict[str, Data]) -> str:
    """The block ``<!--q:warm-blocks-->``: each block of the warm-start study against 1 worker,
    its seeds and verdict counts, and what the rule of every "trains like" claim decides."""
    from gan3d.convergence.warmstart import parse
    from gan3d.report.claims.equivalence import LR_SEEDS, decide_equivalence

    data = _load(_WARM, root, cache, "block 'warm-blocks'")
    rows = ["", "", "| block | workers | lr, other changes | seeds | equivalent | inconclusive | "
            "different | verdict |", "|---|---|---|---|---|---|---|---|"]
    said = {"reproduced": "holds", "not reproduced": "fails", "inconclusive": "undecided"}
    names = dict.fromkeys(r["candidate"] for r in data.get("verdicts", []))
    interval = data["warm"]["showers"] // data["warm"]["points"]
    for name in sorted(names, key=lambda x: parse(x)["workers"]):  # stable: the study's order
        block = [r for r in data["verdicts"] if r["candidate"] == name]
        c, seeds = parse(name), min(int(r.get("n") or 0) for r in block)
        n = c["workers"]
        lr = "lr" if n == 1 else {"linear": f"lr x {n}", "sqrt": f"lr x sqrt {n}",
                                  "none": "lr"}[c["rule"]]
        lr += "".join([f", warm-up over the first {c['warmup'] * interval:,} showers"
                       if c.get("warmup") else "",
                       f", local SGD k = {c['sync_every']}" if c["sync_every"] > 1 else "",
                       ", bfloat16" if c["precision"] == "bfloat16" else ""])
        count = [sum(r["verdict"] == v for r in block)
                 for v in ("equivalent", "inconclusive", "different")]
        verdict = (f"too few seeds (< {LR_SEEDS})" if seeds < LR_SEEDS else
                   said[decide_equivalence(block, "study", name).verdict])
        rows.append(f"| `{name}` | {n} | {lr} | {seeds} | " + " | ".join(map(str, count))
                    + f" | {verdict} |")
    return "\n".join(rows) + "\n\n"


BLOCKS: dict[str, Callable[[Path, dict[str, Data]], str]] = {"sources": _sources,
                                                             "warm-blocks": _warm_blocks}


# -- the pages -------------------------------------------------------------------------------

MARKER = re.compile(r"<!--q:(?P<id>[\w.\-]+)-->(?P<text>(?:(?!<!--q:).)*?)<!--/q-->", re.S)
_OPEN = re.compile(r"<!--q:([\w.\-]+)-->")


@dataclasses.dataclass(frozen=True)
class Stale:
    """A marker whose text is not what its quote renders (``expected`` None: no such quote)."""

    path: str
    line: int
    id: str
    found: str
    expected: str | None

    def __str__(self) -> str:
        if self.expected is None:
            return (f"{self.path}:{self.line}: {self.id!r} is no quote of tools/pages/quotes.py "
                    f"({self.found})")
        return f"{self.path}:{self.line}: {self.id}: the page says {self.found!r}, the data {self.expected!r}"


def _expected(qid: str, root: Path, cache: dict[str, Data]) -> str | None:
    if qid in BLOCKS:
        return BLOCKS[qid](root, cache)
    return render_quote(QUOTES[qid], root, cache) if qid in QUOTES else None


def _scan(text: str, name: str, root: Path, cache: dict[str, Data]) -> list[tuple[re.Match, Stale]]:
    out, closed = [], set()
    for m in MARKER.finditer(text):
        closed.add(m.start())
        want = _expected(m["id"], root, cache)
        if want != m["text"]:
            line = text.count("\n", 0, m.start()) + 1
            out.append((m, Stale(name, line, m["id"], m["text"], want)))
    for m in _OPEN.finditer(text):  # an opening mark that no closing mark follows
        if m.start() not in closed:
            line = text.count("\n", 0, m.start()) + 1
            out.append((m, Stale(name, line, m[1], "no closing <!--/q-->", None)))
    return out


def check(path: str | Path, root: Path | None = None) -> list[Stale]:
    """Every marker of the page at ``path`` whose text differs from what its quote renders
    (numbers from the files under ``root``, the repository by default)."""
    text = Path(path).read_text()
    return [s for _, s in _scan(text, str(path), Path(root or repo_root()), {})]


def render(path: str | Path, root: Path | None = None) -> tuple[int, list[Stale]]:
    """Rewrite the stale marked texts of ``path`` in place (atomically, only if one changed).
    Returns how many were rewritten and the markers it cannot fix (unknown id, not closed)."""
    path, root, cache = Path(path), Path(root or repo_root()), {}
    text = path.read_text()
    found = _scan(text, str(path), root, cache)
    fix = [(m, s) for m, s in found if s.expected is not None]
    for m, s in sorted(fix, key=lambda ms: -ms[0].start()):  # from the end: offsets stay valid
        text = text[:m.start("text")] + s.expected + text[m.end("text"):]
    if fix:
        with atomic_path(path) as tmp:
            tmp.write_text(text)
    return len(fix), [s for _, s in found if s.expected is None]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/pages quotes",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("pages", nargs="*", help="markdown files (README.md docs/*.md)")
    ap.add_argument("--write", action="store_true", help="rewrite the stale marked texts in place")
    ap.add_argument("--list", action="store_true", help="print every quote, its file and machine")
    opts = ap.parse_args(argv)
    try:
        if opts.list:
            cache: dict[str, Data] = {}
            for q in QUOTES.values():
                print(f"{q.id:34s} {render_quote(q, cache=cache)}\n{'':34s} {q.source}; "
                      f"{machine(q, cache=cache)}")
        bad: list[Any] = []
        for page in opts.pages:
            if opts.write:
                n, left = render(page)
                print(f"{page}: {n} marked text(s) rewritten")
                bad += left
            else:
                bad += check(page)
            bad += unmarked(page)
    except StudyFileError as exc:
        print(f"quotes: {exc}", file=sys.stderr)
        return 1
    for problem in bad:
        print(problem, file=sys.stderr)
    return 1 if bad else 0

