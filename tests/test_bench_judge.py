"""The bench's serve-judge section runs serve with the judge off, hanging and answering, in quick mode. No timing value
is asserted (it depends on the machine): the variants, the accounting and the report's lines are."""
from __future__ import annotations

from typing import Any

import pytest

from otel_agent_eval.tools.bench import cli, judge
from otel_agent_eval.tools.bench import report as report_bench


@pytest.fixture(scope="module")
def quick() -> dict[str, Any]:
    return cli.run(quick=True, sections=("serve-judge",))


def test_the_section_runs_every_variant_with_no_accepted_span_lost(quick: dict[str, Any]) -> None:
    j = quick["serve_judge"]
    assert [s["variant"] for s in j["summary"]] == [v for v, _ in judge.VARIANTS]
    assert [r["variant"] for r in j["rows"]] == [v for v, _ in judge.VARIANTS] * cli.SIZES["quick"]["judge_rounds"]
    for row in j["rows"]:
        account = row["accounting"]
        assert account["equal"] and account["acknowledged"] == account["sink"] > 0, row
        assert row["spans_per_cpu_s"] > 0
    off = j["summary"][0]
    assert off["ratio"] == 1.0 and all(s["ratio"] > 0 for s in j["summary"])
    by = {r["variant"]: r for r in j["rows"]}
    assert by["off"]["judgements"] == {}  # no judge family with the judge off
    assert sum(by["hanging"]["judgements"].values()) > 0 and sum(by["answering"]["judgements"].values()) > 0


def test_the_report_prints_each_variant_and_its_ratio(quick: dict[str, Any]) -> None:
    text = report_bench.format_report(quick)
    assert "SERVE WITH THE JUDGE" in text and text.count("no accepted span lost") == len(judge.VARIANTS)
    for _, label in judge.VARIANTS:
        assert label in text
