"""Every benchmark that writes a result a user names refuses to replace an existing one without
--force, before any work: one argparse error line naming the file, exit 2, the file untouched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
WRITERS = ["bench_algorithms.py", "bench_allreduce.py", "bench_backends.py", "bench_data.py",
           "bench_inference.py", "bench_interconnect.py", "bench_roofline.py", "bench_training.py"]


@pytest.mark.parametrize("script", WRITERS)
def test_an_existing_result_is_refused_before_any_work(script, tmp_path):
    out = tmp_path / "result.json"
    out.write_text('{"another": "result"}')
    run = subprocess.run([sys.executable, str(BENCH / script), "--output", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stdout[-1000:] + run.stderr[-1000:]
    last = run.stderr.strip().splitlines()[-1]
    assert last == (f"{script}: error: {out} already holds another result (result.json); pass "
                    "--force to replace it, or name another path")
    assert "Traceback" not in run.stderr and out.read_text() == '{"another": "result"}'


def test_every_benchmark_with_an_output_is_listed():
    """A new benchmark that writes --output (bench/_output.py's options) joins the list (and so
    the check)."""
    with_output = sorted(p.name for p in BENCH.glob("bench_*.py")
                         if "_output.add_options(" in p.read_text()
                         and p.name != "bench_precision.py")  # a committed study: a clean tree
    assert with_output == sorted(WRITERS)
