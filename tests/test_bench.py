"""The overhead benchmark runs and reports every row. No timing is asserted: it depends on the machine."""
from __future__ import annotations

import json
import math

from otel_agent_eval.tools import bench


def test_a_tiny_run_reports_every_row_with_positive_timings() -> None:
    result = bench.run(spans=2000, rounds=2, warmup=200)

    assert {"python", "cpu_count", "opentelemetry_sdk"} <= result["machine"].keys()
    assert [r["row"] for r in result["overhead"]] == [row for row, *_ in bench.OVERHEAD_ROWS]
    for row in result["overhead"]:
        assert {"us_per_span", "baseline_us", "added_us", "ratio", "target", "ok", "total_added_us", "total_ratio"} <= row.keys()
        assert row["us_per_span"] > 0 and row["baseline_us"] > 0
        assert math.isfinite(row["added_us"]) and math.isfinite(row["ratio"])  # may be negative at this N
    assert [r["row"] for r in result["throughput"]] == [row for row, _ in bench.THROUGHPUT_ROWS]
    for row in result["throughput"]:
        assert row["us_per_span"] > 0 and row["spans_per_s"] > 0
    table = bench.format_table(result)
    assert all(row in table for row, *_ in bench.OVERHEAD_ROWS + bench.THROUGHPUT_ROWS)
    assert json.loads(json.dumps(result))["overhead"][0]["target"] == 0.05
