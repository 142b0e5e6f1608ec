"""The example `score` tables in the docs have the columns `score` prints, and name a group without an agent or task
as `score` does (`(no agent)`, `(unrouted)`)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GROUP_HEADER = ["agent", "task", "runs", "completed", "cost/run", "LLM priced by", "health", "calls", "efficiency", "wasted",
                "gate"]


@pytest.mark.parametrize("doc", ["README.md", "docs/score.md", "docs/first-catalog.md"])
def test_example_score_tables_have_the_columns_score_prints(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    headers = [line for line in text.splitlines() if re.match(r"agent +task +runs ", line)]
    assert headers, doc
    assert all(re.split(r"  +", line.strip()) == GROUP_HEADER for line in headers), headers
    assert not re.search(r"^(-|\w+) +- +\d", text, re.M)  # a group row with `-` for its agent or task


def test_the_header_is_the_one_in_the_code():
    source = (ROOT / "otel_agent_eval" / "tools" / "score_table.py").read_text(encoding="utf-8")
    assert repr(GROUP_HEADER).replace("'", '"') in source
