"""On request: instructions and simulated L2 misses per span, counted by cachegrind in child processes."""
from __future__ import annotations

import gc
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any


from .processor import SPANS_PER_RUN, VARIANTS, _processor, _provider, _timed_block


# -- on request: instructions per span, counted under valgrind ---------------------------

COUNT_WARMUP = 50  # runs before the counted ones: routes, static scores and series made, code paths taken
SIMULATED_L2 = "524288,8,64"  # bytes, ways, line: the per-core L2 of AMD Zen 2/3 server cores


def instructions(runs: int, keys: Sequence[str] | None = None) -> dict[str, Any]:
    """Every variant's instructions and simulated L2 misses per span: cachegrind's counts for a child that ends
    2 x `runs` whole runs after its warm-up, minus one that ends `runs`; the processors' own threads count too."""
    valgrind = shutil.which("valgrind")
    keys = list(keys or [key for key, _ in VARIANTS])
    if valgrind is None:
        return {"runs": runs, "rows": [], "error": "valgrind not found (Debian: apt-get install valgrind)"}

    def count(key: str, n: int) -> tuple[int, int, dict[str, Any]]:
        child = subprocess.run([valgrind, "--tool=cachegrind", "--cache-sim=yes", f"--LL={SIMULATED_L2}",
                                "--cachegrind-out-file=/dev/null", sys.executable, "-m", "otel_agent_eval.bench",
                                "--count-child", key, str(n)], capture_output=True, text=True)
        counts = [re.search(pattern, child.stderr) for pattern in (r"I\s+refs:\s+([\d,]+)", r"LL misses:\s+([\d,]+)")]
        if child.returncode != 0 or None in counts:
            last = (child.stderr.strip().splitlines() or [""])[-1]
            raise RuntimeError(f"counting {key} failed (exit {child.returncode}): {last}")
        refs, misses = (int(found.group(1).replace(",", "")) for found in counts)  # type: ignore[union-attr]
        return refs, misses, json.loads(child.stdout.strip().splitlines()[-1])

    rows = []
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        counted = {(key, n): pool.submit(count, key, n) for key in keys for n in (runs, 2 * runs)}
        try:
            for key in keys:
                (work, missed, _), (more_work, more_missed, state) = counted[(key, runs)].result(), counted[(key, 2 * runs)].result()
                rows.append({"variant": key, "label": dict(VARIANTS)[key],
                             "instructions_per_span": (more_work - work) / (runs * SPANS_PER_RUN),
                             "l2_misses_per_span": (more_missed - missed) / (runs * SPANS_PER_RUN),
                             "spans_unscored": state["unscored"]})
        except (RuntimeError, ValueError, IndexError) as exc:  # a child that failed: said in the report, no traceback
            return {"runs": runs, "rows": [], "error": str(exc)}
    for row in rows:
        row["ratio"] = row["instructions_per_span"] / rows[0]["instructions_per_span"]
    return {"runs": runs, "error": None, "rows": rows}


def _count_child(key: str, runs: int) -> None:
    """Inside valgrind: the warm-up, then `runs` whole runs and the flush; prints what a count needs to be trusted."""
    processor = _processor(key)
    tracer = _provider(processor).get_tracer(__name__)
    flush = processor.force_flush if processor is not None else (lambda: True)
    gc.disable()  # a collection would land in one count and not the other
    _timed_block(tracer, flush, COUNT_WARMUP, [], [])
    _timed_block(tracer, flush, runs, [], [])
    metrics = getattr(processor, "metrics", None)
    print(json.dumps({"unscored": metrics.unscored.value if metrics is not None else 0}))
