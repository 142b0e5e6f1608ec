"""Catalog loading and the one-line messages for broken catalogs."""
from __future__ import annotations

import textwrap

import pytest
from jsonschema import Draft202012Validator

from otel_agent_eval.config.catalog import CATALOG_SCHEMA, CatalogError, load_catalog, parse_catalog

TOOL = "{cost_usd: 0.001, latency_ms: 10, capabilities: [search], complexity: simple}"


def test_packaged_catalog_holds_the_article_figures():
    catalog = load_catalog()
    figures = {name: (t.cost_usd, t.latency_ms) for name, t in catalog.tools.items()}
    assert figures == {
        "basic_calculator": (0.0, 50),
        "code_interpreter": (0.002, 200),
        "wolfram_alpha": (0.01, 800),
        "local_index": (0.0, 30),
        "web_search": (0.003, 400),
        "simple_filter": (0.0, 100),
        "ml_pipeline": (0.10, 8000),
    }
    assert {"balanced", "cost_critical", "latency_critical"} <= set(catalog.profiles)
    assert set(catalog.thresholds) == {"development", "staging", "production"}
    assert catalog.thresholds_for("development").fail < catalog.thresholds_for("production").fail
    used = {t for route in catalog.tasks for t in (route.optimal_tool, *route.expected_tools)}
    assert used <= set(catalog.tools)


def test_aliases_resolve_to_their_tool():
    assert load_catalog().tool("calculator").name == "basic_calculator"
    assert load_catalog().tool("nope") is None


def test_minimal_catalog_inherits_builtin_profiles_and_thresholds():
    catalog = parse_catalog(f"tools:\n  search: {TOOL}\n")
    assert catalog.profile().name == "balanced"
    assert catalog.thresholds_for().environment == "production"
    assert catalog.profile("cost_critical").cost_weight == 0.8


def test_thresholds_give_pass_warn_fail():
    t = load_catalog().thresholds_for("staging")
    assert [t.verdict(s) for s in (0.9, 0.85, 0.8, 0.75, 0.7)] == ["pass", "pass", "warn", "warn", "fail"]


def test_route_matches_exact_and_glob_on_all_keys():
    route = load_catalog().task("arithmetic")
    assert route.matches({"gen_ai.agent.name": "math_agent"}.get)
    assert route.matches({"gen_ai.agent.name": "calculator-v2"}.get)
    assert not route.matches({"gen_ai.agent.name": "support"}.get)
    assert not route.matches({}.get)


def test_schema_is_a_valid_json_schema_and_accepts_the_default_catalog():
    import yaml
    from importlib import resources

    Draft202012Validator.check_schema(CATALOG_SCHEMA)
    data = yaml.safe_load(resources.files("otel_agent_eval.config").joinpath("default_catalog.yaml").read_text())
    assert list(Draft202012Validator(CATALOG_SCHEMA).iter_errors(data)) == []


BROKEN = [
    ("tools:\n  search: {cost_usd: -1, latency_ms: 1, capabilities: [x], complexity: simple}\n",
     "bad.yaml:2: tools.search.cost_usd: must be >= 0 (got -1)"),
    (f"tools:\n  search: {TOOL}\nprofiles:\n  p: {{cost_weight: 0.5, latency_weight: 0.6}}\n",
     "bad.yaml:4: profiles.p: cost_weight + latency_weight must sum to 1 (got 0.5 + 0.6 = 1.1)"),
    (f"tools:\n  search: {TOOL}\ntasks:\n  faq:\n    capability: search\n    optimal_tool: web_search\n",
     "bad.yaml:6: tasks.faq.optimal_tool: unknown tool 'web_search'; known tools: search"),
    (f"tools:\n  search: {TOOL}\ntasks:\n  faq:\n    capability: search\n    expected_tools: [search, nope]\n",
     "bad.yaml:6: tasks.faq.expected_tools.1: unknown tool 'nope'; known tools: search"),
    (f"tools:\n  search: {TOOL}\ncolour: red\n",
     "bad.yaml:3: colour: unknown key; expected one of: version, default_profile, default_environment, tools, profiles, thresholds, tasks, models, attribute_mapping"),
    ("tools:\n  search:\n    cost_usd: 1\n    latency_ms: 1\n    capabilities: [x]\n    complexity: simple\n    speed: fast\n",
     "bad.yaml:7: tools.search.speed: unknown key; expected one of: description, cost_usd, context_usd, latency_ms, latency_slo_ms, capabilities, complexity, aliases, parameters"),
    ("tools:\n  search: {latency_ms: 1, capabilities: [x], complexity: simple}\n",
     "bad.yaml:2: tools.search: 'cost_usd' is required"),
    ("tools:\n  search: {cost_usd: 0, latency_ms: 1, capabilities: [x], complexity: hard}\n",
     "bad.yaml:2: tools.search.complexity: must be one of simple, moderate, advanced (got 'hard')"),
    (f"tools:\n  search: {TOOL}\nthresholds:\n  production: {{warn: 0.8, fail: 0.9}}\n",
     "bad.yaml:4: thresholds.production: warn (0.8) must be at least fail (0.9)"),
    (f"tools:\n  search: {TOOL}\ndefault_profile: thrifty\n",
     "bad.yaml:3: default_profile: unknown profile 'thrifty'; known: balanced, cost_critical, latency_critical"),
    (f"tools:\n  search: {TOOL}\ntasks:\n  faq: {{capability: teleport}}\n",
     "bad.yaml:4: tasks.faq.capability: no tool in the catalog has capability 'teleport'"),
    ("tools:\n  search: {cost_usd: 0, latency_ms: 1, capabilities: [x], complexity: simple, parameters: {type: objekt}}\n",
     "bad.yaml:2: tools.search.parameters.type: not a valid JSON Schema"),
    (f"tools:\n  a: {TOOL}\n  b: {{cost_usd: 0, latency_ms: 1, capabilities: [x], complexity: simple, aliases: [a]}}\n",
     "bad.yaml:3: tools.b.aliases: alias 'a' is already the name or an alias of tool 'a'"),
    ("tools: [1\n", "bad.yaml:2: not valid YAML"),
    ("- just\n- a list\n", "bad.yaml: expected a mapping with a `tools:` section at the top"),
    # issue #12: what YAML reads silently wrong, or what would fail later, is refused here with its line
    ("tools:\n  search: {cost_usd: .nan, latency_ms: 1, capabilities: [x], complexity: simple}\n",
     "bad.yaml:2: tools.search.cost_usd: must be a finite number (got .nan)"),
    (f"tools:\n  search: {TOOL}\n  search: {TOOL}\n",
     "bad.yaml:3: tools.search: duplicate key (first on line 2); YAML would silently keep only the last one"),
    (f"tools:\n  search: {TOOL}\n  on: {TOOL}\n",
     'bad.yaml:3: tools.on: the name on is read by YAML as true/false, not as text; put it in quotes: "on"'),
    (f"tools:\n  search: {TOOL}\n  extra: " + "[" * 100 + "]" * 100 + "\n",
     "bad.yaml:3: tools.extra.0.0.0.0.…: nested deeper than 64 levels (MAX_CATALOG_DEPTH)"),
    ("tools:\n  search: {cost_usd: 0, latency_ms: 1, capabilities: [x], complexity: simple, description: !!float x}\n",
     "bad.yaml:2: tools.search.description: cannot be read as a number (got x)"),
    ("tools:\n  search: &s {cost_usd: 0, latency_ms: 1, capabilities: [x], complexity: simple, parameters: {p: *s}}\n",
     "bad.yaml:2: tools.search.parameters.p: alias *s is used inside the value it names"),
    ("tools: {s: {cost_usd: 0, latency_ms: 1, capabilities: [x], complexity: simple, description: *nope}}\n",
     "bad.yaml:1: tools.s.description: alias *nope names no anchor (&name) above it"),
    ("tools:\n  s: \x07\n", "bad.yaml:2: not valid YAML: character U+0007 in column 6 is not allowed"),
    ("tools:\n  search: {cost_usd: 1e-3, latency_ms: 1, capabilities: [x], complexity: simple}\n",
     "bad.yaml:2: tools.search.cost_usd: must be a number, but YAML reads 1e-3 as text (its floats need a dot and a "
     "signed exponent): write 1.0e-3"),
    ("tools:\n  search: {cost_usd: 0, latency_ms: 2.5E3, capabilities: [x], complexity: simple}\n",
     "bad.yaml:2: tools.search.latency_ms: must be a number, but YAML reads 2.5E3 as text (its floats need a dot and a "
     "signed exponent): write 2.5e+3"),
]


@pytest.mark.parametrize("text,message", BROKEN, ids=[m.split(": ")[1][:40] for _, m in BROKEN])
def test_broken_catalogs_give_one_clear_message(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    rendered = str(caught.value).replace(str(tmp_path) + "/", "")
    assert rendered.startswith(message), rendered
    assert "\n" not in rendered


def test_unreadable_file_names_the_file(tmp_path):
    with pytest.raises(CatalogError, match=r"missing\.yaml: cannot read the file"):
        load_catalog(tmp_path / "missing.yaml")


def test_a_long_value_is_quoted_short_and_a_long_list_of_names_is_cut():
    from otel_agent_eval.config.catalog import check_catalog

    tools = "".join(f"  tool_{i}: {TOOL}\n" for i in range(50))
    with pytest.raises(CatalogError) as caught:
        parse_catalog(f"tools:\n{tools}  x: {{cost_usd: 0, latency_ms: 1, capabilities: [x], complexity: {'y' * 100_000}}}\n", source="c.yaml")
    assert str(caught.value).startswith("c.yaml:52: tools.x.complexity: must be one of simple, moderate, advanced (got 'yyyyyy")
    assert len(str(caught.value)) < 200
    (unknown,) = check_catalog(f"tools:\n{tools}tasks:\n  t: {{capability: search, optimal_tool: {'z' * 100_000}}}\n", "c.yaml")
    assert str(unknown).startswith("c.yaml:53: tasks.t.optimal_tool: unknown tool 'zzz")
    assert str(unknown).endswith("known tools: tool_0, tool_1, tool_2, tool_3, tool_4, tool_5, tool_6, tool_7, tool_8, tool_9, … (40 more)")
    assert len(str(unknown)) < 250


def test_catalog_error_is_a_value_error_with_parts():
    with pytest.raises(ValueError) as caught:
        parse_catalog(textwrap.dedent("""\
            tools:
              search: {cost_usd: -1, latency_ms: 1, capabilities: [x], complexity: simple}
            """), source="c.yaml")
    error = caught.value
    assert (error.source, error.path, error.line) == ("c.yaml", "tools.search.cost_usd", 2)


def test_describe_catalog_aligns_long_names_and_lists_model_prices(tmp_path):
    from otel_agent_eval.tools.cli import check_summary, describe

    path = tmp_path / "c.yaml"
    path.write_text(
        "tools:\n"
        "  precipitation_forecast_for_the_whole_week: {cost_usd: 0.001, latency_ms: 5, capabilities: [weather], complexity: simple}\n"
        "  a: {cost_usd: 0.02, latency_ms: 1200, latency_slo_ms: 3000, capabilities: [weather], complexity: advanced}\n"
        "tasks:\n"
        "  Weather Forecaster for the coast: {capability: weather, match: {gen_ai.agent.name: [Weather Forecaster]}}\n"
        "models:\n"
        "  nonexistent-model-id-12345: {input_per_1k: 0.001, output_per_1k: 0.002}\n", encoding="utf-8")
    catalog = load_catalog(path)
    text = describe(catalog)
    blocks = text.split("\n\n")
    tools, tasks, models = blocks[1].splitlines(), blocks[2].splitlines(), blocks[3].splitlines()
    for table, left in ((tools, ("tier", "capabilities")), (tasks, ("capability", "profile", "optimal tool", "match"))):
        for header in left:  # a left-aligned column starts where its header does, in every row
            start = table[0].index(header)
            assert all(row[start - 2:start] == "  " and row[start] != " " for row in table[1:]), (header, table)
    assert tools[1].split() == ["precipitation_forecast_for_the_whole_week", "0.0010", "5ms", "-", "simple", "weather"]
    assert tools[0].index("cost $") + len("cost $") == tools[1].index("0.0010") + len("0.0010")  # right-aligned numbers
    assert tasks[1].startswith("Weather Forecaster for the coast  weather  ")
    assert models == ["model                       input $/1k  cached input $/1k  output $/1k",
                      "nonexistent-model-id-12345       0.001                  -        0.002"]
    assert check_summary(catalog) == "2 tools, 1 task"


def test_the_schema_states_the_real_ignore_tools_default():
    """An editor shows this text: every name of the default list, which the catalog uses when the key is absent."""
    from otel_agent_eval.config.catalog import DEFAULT_IGNORE_TOOLS

    description = CATALOG_SCHEMA["properties"]["ignore_tools"]["description"]
    assert all(repr(name) in description for name in DEFAULT_IGNORE_TOOLS) and len(DEFAULT_IGNORE_TOOLS) == 4
    tools = "tools:\n  t: {cost_usd: 0, latency_ms: 1, capabilities: [c], complexity: simple}\n"
    assert parse_catalog(tools).ignore_tools == DEFAULT_IGNORE_TOOLS
