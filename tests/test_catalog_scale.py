"""Large catalogs: the hand check of tool entries accepts exactly what the catalog schema accepts."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from otel_agent_eval.config.catalog import CATALOG_SCHEMA, COMPLEXITY_TIERS, parse_catalog, tool_entry_ok
from otel_agent_eval.core.scoring import Scorer

TOOL_SCHEMA = CATALOG_SCHEMA["properties"]["tools"]["additionalProperties"]
number = st.one_of(st.integers(-2, 5), st.floats(-2, 5), st.just(float("nan")), st.booleans(), st.just("1"))
names = st.one_of(st.lists(st.sampled_from(["a", "b", "", 1]), max_size=3), st.just("a"), st.none())
VALID = {"cost_usd": 0.002, "latency_ms": 30, "capabilities": ["search"], "complexity": "simple"}
FIELDS = {"cost_usd": number, "latency_ms": number, "latency_slo_ms": number, "capabilities": names, "aliases": names,
          "complexity": st.sampled_from([*COMPLEXITY_TIERS, "huge", 1]), "description": st.one_of(st.text(max_size=3), st.integers()),
          "parameters": st.one_of(st.just({"type": "object"}), st.just([])), "extra": st.just(1)}


@st.composite
def entry(draw):
    """A valid entry with one to three fields changed, dropped or added; or no mapping at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.one_of(st.none(), st.integers(), st.lists(st.none())))
    value = dict(VALID)
    for key in draw(st.lists(st.sampled_from(sorted(FIELDS)), min_size=1, max_size=3, unique=True)):
        if key in value and draw(st.booleans()) and draw(st.booleans()):
            del value[key]
        else:
            value[key] = draw(FIELDS[key])
    return value


@settings(max_examples=1_000, deadline=None)
@given(entry=entry())
def test_the_hand_check_agrees_with_the_schema(entry):
    assert tool_entry_ok(entry) == Draft202012Validator(TOOL_SCHEMA).is_valid(entry)


def test_ten_thousand_tools_and_a_thousand_routes_build():
    tools = "\n".join(f"  t{i}: {{cost_usd: {i % 7 / 1000}, latency_ms: {10 + i % 50}, capabilities: [cap{i % 100}], complexity: simple}}"
                      for i in range(10_000))
    tasks = "\n".join(f"  task{i}: {{match: {{app.route: \"/r{i}\"}}, capability: cap{i % 100}}}" for i in range(1_000))
    catalog = parse_catalog(f"tools:\n{tools}\ntasks:\n{tasks}\n")
    scorer = Scorer(catalog)
    route = scorer.route("agent", {"app.route": "/r777"})
    assert route.name == "task777"
    assert scorer.static_score("t77", route).known and scorer.optimal_for(route).capabilities == ("cap77",)
