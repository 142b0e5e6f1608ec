"""The benchmark runs every section and reports every row. No timing value is asserted: it depends on the machine."""
from __future__ import annotations

import json
import math
from typing import Any

import pytest

from otel_agent_eval.tools import bench


def _strict(text: str) -> Any:
    """JSON as any parser reads it: NaN and Infinity are not JSON."""
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} in the JSON output")
    return json.loads(text, parse_constant=refuse)


def _positive(row: dict[str, Any], *keys: str) -> None:
    for key in keys:
        assert isinstance(row[key], (int, float)) and math.isfinite(row[key]) and row[key] > 0, (key, row)


@pytest.fixture(scope="module")
def quick() -> dict[str, Any]:
    return bench.run(quick=True)


def test_a_quick_run_reports_every_section_and_row_with_positive_figures(quick: dict[str, Any]) -> None:
    result = _strict(json.dumps(quick))
    assert {"python", "cpu_count", "opentelemetry_sdk", "prometheus_client"} <= result["environment"].keys()

    rows = result["overhead"]["rows"]
    assert [r["variant"] for r in rows] == [key for key, _ in bench.VARIANTS]
    for row in rows:
        _positive(row, "total_cpu_us", "total_cpu_ratio", "app_wall_us", "app_wall_ratio", "app_cpu_us",
                  "tool_end_p99_us", "tool_end_max_us", "root_end_p99_us", "root_end_max_us")
        assert row["end_samples"]["tool"] > 0 and row["end_samples"]["root"] > 0
    by_variant = {r["variant"]: r for r in rows}
    assert by_variant["bare"]["total_cpu_ratio"] == 1.0 and by_variant["bare"]["target"] is None
    for variant, target in bench.TARGETS.items():
        assert by_variant[variant]["target"] == target and isinstance(by_variant[variant]["target_met"], bool)

    assert [r["variant"] for r in result["throughput"]] == ["ours", "ours+copies"]
    for row in result["throughput"]:
        _positive(row, "us_per_run", "tool_spans_per_s_per_core")

    load = result["scrape_under_load"]
    assert load["scrapes"] >= 1
    _positive(load, "p50_ms", "p99_ms", "max_ms", "samples", "bytes", "load_runs_per_s")

    assert len(result["scrape_size"]) == 2
    for row in result["scrape_size"]:
        _positive(row, "samples", "bytes", "s_per_scrape")

    assert len(result["catalog_scale"]) == 2
    for row in result["catalog_scale"]:
        assert row["error"] is None and row["build_over_s"] is None, row
        _positive(row, "parse_s", "build_s", "route_repeated_us", "route_fresh_us")

    baseline, routed = result["routing"]  # the no-routes baseline beside the glob routes, in the same run
    assert baseline["routes"] == 0 and baseline["bound_us"] is None
    assert routed["routes"] == bench.SIZES["quick"]["glob_routes"] and routed["bound_us"] == bench.ROUTE_BOUND_US
    assert isinstance(routed["bound_met"], bool)
    for row in (baseline, routed):
        _positive(row, "cpu_us_per_span", "route_new_value_us", "route_calls")


def test_the_report_names_every_variant_and_says_whether_each_target_is_met(quick: dict[str, Any]) -> None:
    report = bench.format_report(quick)
    for _, label in bench.VARIANTS:
        assert label in report
    for heading in ("OVERHEAD PER SPAN", "THROUGHPUT", "SCRAPE UNDER LOAD", "SCRAPE SIZE", "CATALOG SCALE", "ROUTING A NEW VALUE"):
        assert heading in report
    assert report.count("Target (issue #11)") == len(bench.TARGETS)
    assert all(("met." in line or "MISSED by" in line) for line in report.splitlines() if line.startswith("Target"))


def test_a_capped_catalog_build_reads_over_the_cap() -> None:
    row = {"catalog": "10,000 tools", "parse_s": 1.0, "build_s": None, "build_over_s": 30.0, "memory_mb": None,
           "route_repeated_us": None, "route_fresh_us": None, "error": None}
    assert "over 30" in bench.format_report({"environment": bench.environment(), "catalog_scale": [row]})


def test_the_cli_prints_parseable_json_for_one_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--quick", "--json", "--section", "scrape-size"]) == 0
    result = _strict(capsys.readouterr().out)
    assert result["sections"] == ["scrape-size"] and "overhead" not in result
    assert [r["row"] for r in result["scrape_size"]][0] == "AgentEvalSpanProcessor registry"


def test_the_cli_rejects_nonpositive_sizes() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--quick", "--runs", "0"])


def test_the_floor_section_passes_spans_through_unscored_beside_the_whole_processor(capsys: pytest.CaptureFixture[str]) -> None:
    for key in ("hand-off", "inline-hand-off"):  # hooks, queue and thread only: every span forwarded, none scored
        processor = bench._processor(key)
        processor.forward_to = recorder = Recorder()
        bench._end_runs(bench._provider(processor).get_tracer(__name__), 3)
        processor.force_flush()
        assert len(recorder.ended) == 3 * bench.SPANS_PER_RUN and processor.metrics.scored == 0, key
    assert bench.main(["--quick", "--json", "--section", "floor"]) == 0
    result = _strict(capsys.readouterr().out)
    assert [r["variant"] for r in result["floor"]["rows"]] == [key for key, _ in bench.FLOOR_VARIANTS]
    assert all(r["total_cpu_us"] > 0 for r in result["floor"]["rows"]) and "overhead" not in result
    report = bench.format_report(result)
    assert "FLOOR" in report and all(label in report for _, label in bench.FLOOR_VARIANTS)


class Recorder:
    """A downstream processor that keeps what it is handed."""

    def __init__(self) -> None:
        self.ended: list[Any] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: Any) -> None:
        self.ended.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def test_instructions_are_counted_per_span_under_valgrind() -> None:
    # The section on request, with real cachegrind children (valgrind is installed by .ci/run), for the bare SDK and
    # the processor with and without copies (the suite's time allows three). Counts vary a little with hashing and
    # thread switches, so only what must hold is asserted: the processor does work of its own, more with copies,
    # every span was scored on its thread, and the report shows each row.
    keys = ["bare", "ours", "ours+copies"]
    result = bench.instructions(bench.SIZES["quick"]["counted_runs"], keys)
    assert result["error"] is None
    rows = {r["variant"]: r for r in result["rows"]}
    assert list(rows) == keys
    assert rows["bare"]["ratio"] == 1.0 and rows["bare"]["instructions_per_span"] > 0
    assert 1.0 < rows["ours"]["ratio"] < rows["ours+copies"]["ratio"]
    assert rows["ours"]["spans_unscored"] == rows["ours+copies"]["spans_unscored"] == 0
    assert all(math.isfinite(r["l2_misses_per_span"]) for r in rows.values())  # a difference: near 0 may dip below
    report = bench.format_report({"environment": bench.environment(), "instructions": _strict(json.dumps(result))})
    assert "INSTRUCTIONS PER SPAN" in report and all(rows[k]["label"] in report for k in keys)


def test_without_valgrind_the_instructions_section_says_so(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench.shutil, "which", lambda name: None)
    assert bench.main(["--quick", "--section", "instructions"]) == 0
    assert "not measured: valgrind not found" in capsys.readouterr().out


def test_a_count_that_fails_is_reported_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench.sys, "executable", "/bin/false")  # valgrind runs a child that fails at once
    result = bench.instructions(1, ["bare"])
    assert result["rows"] == [] and result["error"].startswith("counting bare failed (exit 1)")
