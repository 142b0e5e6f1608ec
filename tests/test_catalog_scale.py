"""Large catalogs: the hand check of tool entries accepts exactly what the catalog schema accepts, and
the fast read of plainly written YAML gives exactly the data of the exact (node-composing) read, or gives up."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from test_catalog_safety import CATALOG, NASTY, PLAIN_SCALARS, TOOL, mutated_catalog

from otel_agent_eval.config import catalog as catalog_module
from otel_agent_eval.config.catalog import (CATALOG_SCHEMA, COMPLEXITY_TIERS, CatalogError, _parse_yaml, _plain_data, _Problem,
                                            load_catalog, parse_catalog, tool_entry_ok)
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


def big_catalog(tools: int = 10_000, tasks: int = 1_000) -> str:
    """`tools` tools and `tasks` routes, one line each, as a large generated catalog is written."""
    lines = [f"  t{i}: {{cost_usd: {i % 7 / 1000}, latency_ms: {10 + i % 50}, capabilities: [cap{i % 100}], complexity: simple}}"
             for i in range(tools)]
    routes = [f"  task{i}: {{match: {{app.route: \"/r{i}\"}}, capability: cap{i % 100}}}" for i in range(tasks)]
    return "tools:\n" + "\n".join(lines) + "\ntasks:\n" + "\n".join(routes) + "\n"


def test_ten_thousand_tools_and_a_thousand_routes_build(tmp_path, monkeypatch):
    path = tmp_path / "big.yaml"
    path.write_text(big_catalog())
    exact_reads = []
    monkeypatch.setattr(catalog_module, "_parse_yaml", lambda text: exact_reads.append(text) or _parse_yaml(text))
    started = time.perf_counter()
    catalog = load_catalog(path)
    loaded = time.perf_counter()
    scorer = Scorer(catalog)
    print(f"10,000 tools and 1,000 routes: loaded in {loaded - started:.2f}s, scorer built in {time.perf_counter() - loaded:.2f}s")
    assert exact_reads == []  # read by the fast path: the node-composing one is for problems only
    assert (len(catalog.tools), len(catalog.tasks)) == (10_000, 1_000)
    assert list(catalog.tools)[:3] == ["t0", "t1", "t2"] and [r.name for r in catalog.tasks[:2]] == ["task0", "task1"]
    tool = catalog.tool("t9999")
    assert (tool.cost_usd, tool.latency_ms, tool.capabilities, tool.complexity) == (9999 % 7 / 1000, 10 + 9999 % 50, ("cap99",), "simple")
    assert catalog.task("task999").match == {"app.route": ("/r999",)} and catalog.task("task999").capability == "cap99"
    route = scorer.route("agent", {"app.route": "/r777"})
    assert route.name == "task777"
    assert scorer.static_score("t77", route).known and scorer.optimal_for(route).capabilities == ("cap77",)
    assert scorer.route("agent", {"app.route": "/nowhere"}) is None
    assert parse_catalog(path.read_text(), source=str(path)) == catalog


def assert_same_data(text: str) -> None:
    """The fast read gives up (None) or gives exactly what the exact read builds, types and order included,
    for text the exact read finds nothing wrong with."""
    fast = _plain_data(text)
    if fast is None:
        return
    try:
        _, exact, problems = _parse_yaml(text)
    except _Problem as p:
        pytest.fail(f"the fast read took text the exact read refuses: {p.problem}")
    assert problems == [], [p.problem for p in problems]
    assert repr(fast) == repr(exact)  # repr tells 1 from 1.0 from True


def test_the_fast_read_of_a_big_catalog_is_the_exact_data():
    text = big_catalog(2_000, 200)
    assert _plain_data(text) is not None
    assert_same_data(text)


def test_a_problem_in_a_big_catalog_is_still_told_on_its_line():
    text = big_catalog() + f"  task5: {{capability: cap5}}\n"
    with pytest.raises(CatalogError) as caught:
        parse_catalog(text, source="big.yaml")
    assert str(caught.value) == "big.yaml:11003: tasks.task5: duplicate key (first on line 10008); YAML would silently keep only the last one"


@pytest.mark.parametrize("text", [
    f"tools:\n  a: &t {TOOL}\n  b: *t\n",  # anchors and aliases: counted as expanded by the exact read
    f"tools:\n  a: {TOOL}\n  b: {{<<: {{cost_usd: 1}}, latency_ms: 1, capabilities: [s], complexity: simple}}\n",
    f"tools:\n  a: !!map {TOOL}\n",
    f"tools:\n  a: {TOOL}\n  a: {TOOL}\n",
    f"tools:\n  on: {TOOL}\n",
    f"tools:\n  411: {TOOL}\n",
    f"tools:\n  ? [a]\n  : {TOOL}\n",
    "tools:\n  a: {cost_usd: .nan, latency_ms: 1, capabilities: [s], complexity: simple}\n",
    "tools:\n  a: {cost_usd: 1.0e+400, latency_ms: 1, capabilities: [s], complexity: simple}\n",
    f"tools:\n  a: {{cost_usd: {'9' * 5_000}, latency_ms: 1, capabilities: [s], complexity: simple}}\n",
    "tools:\n  a: {cost_usd: 2024-01-01, latency_ms: 1, capabilities: [s], complexity: simple}\n",
    f"tools:\n  a: {TOOL}\n---\ntools:\n  b: {TOOL}\n",
    "tools: " + "[" * 64 + "]" * 64 + "\n",
    "tools: [" + "1, " * 500_000 + "]\n",
    "- tools\n",
    "",
    "tools: {a: [}\n",
])
def test_the_fast_read_gives_up_on_anything_but_plain_yaml(text):
    assert _plain_data(text) is None


def test_the_fast_read_takes_what_is_plain():
    text = ("tools:\n  'on':\n    cost_usd: 1.5e-05\n    latency_ms: 0x10\n    capabilities: [\"a\", 'b']\n    complexity: simple\n"
            "    description: |\n      two\n      lines\n  \"411\": {cost_usd: 0, latency_ms: 1_000, capabilities: [c], complexity: simple}\n"
            "tasks:\n  x: {match: {a: [1, yes, ~, -0.0]}, capability: a}\n")
    data = _plain_data(text)
    assert data["tools"]["on"]["cost_usd"] == 1.5e-05 and data["tools"]["on"]["latency_ms"] == 16
    assert data["tools"]["on"]["description"] == "two\nlines\n" and data["tools"]["411"]["latency_ms"] == 1000
    assert repr(data["tasks"]["x"]["match"]["a"]) == "[1, True, None, -0.0]"
    assert_same_data(text)
    assert _plain_data("tools: " + "[" * 63 + "]" * 63 + "\n") is not None  # 64 levels with the root: the limit, allowed


LEAF = st.one_of(PLAIN_SCALARS, st.sampled_from(NASTY[:40]), st.sampled_from(['"on"', "'411'", "''", '"a: b"', "'x'", "-0.0", "1.5e-05",
                                                                             "0o17", "+12", "1_0.5", "9" * 400]))
TREE = st.recursive(LEAF, lambda kids: st.one_of(
    st.lists(kids, max_size=3).map(lambda items: "[" + ", ".join(items) + "]"),
    st.lists(st.tuples(LEAF, kids), max_size=3).map(lambda pairs: "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}")), max_leaves=8)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=LEAF, value=TREE, other=TREE)
def test_the_fast_read_of_odd_yaml_is_the_exact_data_or_nothing(key, value, other):
    assert_same_data(f"tools:\n  a: {value}\n  {key}: {other}\n")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(content=mutated_catalog())
def test_the_fast_read_of_a_mutated_catalog_is_the_exact_data_or_nothing(content):
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return
    assert_same_data(text)


def test_the_example_catalog_is_read_fast():
    assert _plain_data(CATALOG) is not None
    assert_same_data(CATALOG)


# -- tool parameter schemas: the plain ones skip jsonschema's meta-validation ------------------------------

_SCHEMA_KEYS = ("type", "properties", "items", "additionalProperties", "required", "enum", "examples", "description",
                "title", "format", "minLength", "maximum", "default", "pattern", "oneOf", "$ref", "uniqueItems")
_ANY_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(-2, 2), st.sampled_from(
    ["object", "string", "integer", "objekt", "x", "^(", ""]), st.lists(st.sampled_from(["string", "null", "a", "string"]), max_size=3))


def _schemas() -> st.SearchStrategy:
    return st.recursive(
        st.one_of(st.booleans(), st.dictionaries(st.sampled_from(_SCHEMA_KEYS), _ANY_VALUE, max_size=4)),
        lambda inner: st.one_of(
            st.dictionaries(st.sampled_from(_SCHEMA_KEYS), st.one_of(_ANY_VALUE, inner), max_size=4),
            st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(st.text(max_size=3), inner, max_size=3)})),
        max_leaves=12)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=_schemas())
def test_a_schema_the_fast_check_accepts_is_one_jsonschema_accepts(schema):
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    from otel_agent_eval.config.catalog import _surely_valid_schema

    if _surely_valid_schema(schema):
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            pytest.fail(f"the fast check accepted an invalid schema {schema!r}: {exc.message}")


def test_plain_parameter_schemas_are_accepted_by_the_fast_check():
    from otel_agent_eval.config.catalog import _surely_valid_schema

    plain = {"type": "object", "properties": {"query": {"type": "string", "description": "what to look up", "minLength": 1},
                                              "limit": {"type": ["integer", "null"], "maximum": 50, "default": 10},
                                              "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}},
             "required": ["query"], "additionalProperties": False}
    assert _surely_valid_schema(plain)
    assert not _surely_valid_schema({"type": "objekt"})  # jsonschema decides, and explains
    assert not _surely_valid_schema({"type": "string", "pattern": "^("})  # regexes are jsonschema's to check
