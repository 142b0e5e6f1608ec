"""The bench's realistic-mix section runs every path on both mixes beside its old path and its anchor. No timing value
is asserted (it depends on the machine): the rows, the accounting and the goals' lines are."""
from __future__ import annotations

from typing import Any

import pytest

from otel_agent_eval.tools.bench import cli, mix
from otel_agent_eval.tools.bench import report as report_bench


@pytest.fixture(scope="module")
def quick() -> dict[str, Any]:
    from collector_binary import otelcol

    size = cli.SIZES["quick"]
    return {"processor": mix.processor_mixes(size["runs"], size["rounds"], size["warmup"]),
            "serve": mix.serve_mix(size["serve_s"], size["serve_connections"], cli.SPANS_PER_REQUEST, size["mix_serve_runs"],
                                   workers=2, collector=otelcol()),
            "score": mix.score_mix(size["score_spans"], 1)}


def test_the_processor_runs_both_mixes_beside_the_bare_sdk_and_its_old_path(quick: dict[str, Any]) -> None:
    p = quick["processor"]
    assert [(r["variant"], r["mix"]) for r in p["rows"]] == [(v, m) for v, _ in mix.PROCESSOR_VARIANTS for m in mix.MIXES]
    assert p["spans_per_run"] == {"agent": 5, "realistic": 17}
    for row in p["rows"]:
        assert row["cpu_us_per_span"] > 0 and row["ratio"] > 0
        if row["variant"] == "bare":
            assert row["ratio"] == 1.0
    assert [r["variant"] for r in p["noise_span"]] == [v for v, _ in mix.PROCESSOR_VARIANTS]


def test_serve_and_score_run_on_the_realistic_mix_beside_the_old_path_and_the_anchors(quick: dict[str, Any]) -> None:
    s = quick["serve"]
    assert [r["hop"] for r in s["rows"]] == ["serve", "serve, old path", "serve --workers 2", "Collector"]
    for row in s["rows"]:
        account = row["accounting"]
        assert account["equal"] and account["acknowledged"] == account["sink"] > 0, row
    by = {r["hop"]: r for r in s["rows"]}
    assert s["speedup"] == pytest.approx(by["serve"]["spans_per_cpu_s"] / by["serve, old path"]["spans_per_cpu_s"])
    assert s["ratio"] == pytest.approx(by["serve"]["spans_per_cpu_s"] / by["Collector"]["spans_per_cpu_s"])
    c = quick["score"]
    assert c["same_report"] and c["calls"] > 0 and c["runs"] > 0 and c["spans"] >= cli.SIZES["quick"]["score_spans"]
    assert c["ratio"] == pytest.approx(c["score_cpu_s_per_million"] / c["orjson_cpu_s_per_million"])


def test_the_report_prints_both_mixes_and_every_goal(quick: dict[str, Any]) -> None:
    text = report_bench.format_report({"environment": cli.environment(), "mix": quick})
    assert "REALISTIC MIX" in text and text.count("no accepted span lost") == 4
    goals = [line for line in text.splitlines() if "Goal (issue #41)" in line]
    assert len(goals) == 5  # a noise span, realistic runs, serve's speed-up, --workers 2, score over orjson
    assert all(line.rstrip().endswith(").") and (": met (" in line or ": MISSED (" in line) for line in goals)
