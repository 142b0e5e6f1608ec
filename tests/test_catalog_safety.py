"""Issue #12: a catalog can never crash, hang or slow the app's start-up.

Each attack found by hand has a test, and random catalogs (mutated text, alias bombs, deep
nesting, odd names and numbers) must either load as a catalog the rest of the app can use
or be refused with one short `CatalogError` line naming the file and, where there is one, the line.
Attacks that took the process down (a hang, a segfault, memory exhaustion) are loaded in a
child process with a time and memory limit, so that a regression fails the test instead of the run.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from otel_agent_eval.config.catalog import CatalogError, load_catalog, parse_catalog
from otel_agent_eval.core.scoring import Scorer
from otel_agent_eval.metrics.collector import EvalMetrics

TOOL = "{cost_usd: 0.001, latency_ms: 10, capabilities: [search], complexity: simple}"
MAX_MESSAGE = 1_000  # a CatalogError is one line of at most this many characters
posix_only = pytest.mark.skipif(os.name != "posix", reason="FIFOs, /dev/zero and resource limits are POSIX")

CATALOG = textwrap.dedent("""\
    version: 1
    default_profile: balanced
    default_environment: production
    tools:
      web_search:
        description: Search the web.
        cost_usd: 0.003
        latency_ms: 400
        latency_slo_ms: 2000
        capabilities: [search, faq_lookup]
        complexity: moderate
        aliases: [search_web]
        parameters: {type: object, required: [query]}
      local_index:
        cost_usd: 0
        latency_ms: 30
        capabilities: [faq_lookup]
        complexity: simple
    profiles:
      thrifty: {cost_weight: 0.9, latency_weight: 0.1}
    thresholds:
      production: {warn: 0.9, fail: 0.8}
    tasks:
      faq:
        match: {gen_ai.agent.name: "support*", app.tier: [1, gold]}
        capability: faq_lookup
        profile: thrifty
        optimal_tool: local_index
        expected_tools: [local_index]
        max_calls: 2
    models:
      gpt-4o-mini: {input_per_1k: 0.00015, output_per_1k: 0.0006}
    """)

CHILD = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from otel_agent_eval.config.catalog import CatalogError, load_catalog
try:
    catalog = load_catalog(sys.argv[1])
except CatalogError as exc:
    message = str(exc)
    print(json.dumps({"error": message[:5000], "length": len(message)}))
else:
    print(json.dumps({"tools": sorted(map(str, catalog.tools))}))
"""


def load_in_child(path: Path, timeout_s: float = 30.0) -> dict:
    """`load_catalog(path)` in a child process with 1 GiB of address space: its outcome, or a failed test."""
    try:
        run = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True,
                             timeout=timeout_s, cwd=path.parent)
    except subprocess.TimeoutExpired:
        pytest.fail(f"load_catalog({path.name}) still had not returned after {timeout_s:g}s")
    assert run.returncode == 0, f"load_catalog({path.name}) took the process down (exit {run.returncode}): {run.stderr[-3000:]}"
    return json.loads(run.stdout)


def refused(outcome: dict, path: Path, pattern: str) -> None:
    assert "error" in outcome, f"{path.name} was loaded: {outcome}"
    assert outcome["length"] <= MAX_MESSAGE, f"a {outcome['length']:,}-character message: {outcome['error'][:300]}…"
    assert "\n" not in outcome["error"]
    assert re.fullmatch(pattern, outcome["error"].replace(str(path), "FILE")), outcome["error"]


def assert_one_clear_line(exc: CatalogError, source: str) -> None:
    message = str(exc)
    assert message.startswith(source), message
    assert "\n" not in message and len(message) <= MAX_MESSAGE, message[:300]
    assert "internal error" not in message, message


def assert_usable(catalog) -> None:
    """What the rest of the app does with a catalog cannot fail: scoring, and a Prometheus scrape."""
    names = [*catalog.tools, *catalog.profiles, *catalog.thresholds, *catalog.models, catalog.default_profile,
             catalog.default_environment, *(r.name for r in catalog.tasks), *(k for r in catalog.tasks for k in r.match)]
    for tool in catalog.tools.values():
        names += [*tool.aliases, *tool.capabilities, tool.complexity]
    assert all(type(n) is str for n in names), [n for n in names if type(n) is not str]
    numbers = [catalog.thresholds_for().warn, catalog.thresholds_for().fail]
    for t in catalog.tools.values():
        numbers += [t.cost_usd, t.latency_ms, t.latency_slo_ms or 0.0]
    numbers += [x for p in catalog.profiles.values() for x in (p.cost_weight, p.latency_weight)]
    numbers += [x for m in catalog.models.values() for x in (m.input_per_1k, m.output_per_1k)]
    assert all(math.isfinite(x) for x in numbers), numbers
    scorer = Scorer(catalog)
    for route in (None, *catalog.tasks):
        for name in catalog.tools:
            assert math.isfinite(scorer.static_score(name, route).efficiency)
    registry = CollectorRegistry()
    EvalMetrics(registry=registry, catalog=catalog)
    generate_latest(registry)


# -- files that are no catalog -------------------------------------------------------------

def test_a_latin1_file_is_refused_naming_the_line_and_byte(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(f"tools:\n  search: {TOOL}\n  caf\xe9: {TOOL}\n".encode("latin-1"))
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    assert str(caught.value) == f"{path}:3: not UTF-8 text: byte 0xe9 in column 6; save the file as UTF-8"


@posix_only
def test_a_symlink_to_dev_zero_is_refused_without_reading(tmp_path):
    path = tmp_path / "zero.yaml"
    path.symlink_to("/dev/zero")
    refused(load_in_child(path), path, r"FILE: not a regular file \(a character device\); a catalog must be a plain YAML file")


@posix_only
def test_a_fifo_is_refused_without_blocking(tmp_path):
    path = tmp_path / "fifo.yaml"
    os.mkfifo(path)
    refused(load_in_child(path, timeout_s=20), path, r"FILE: not a regular file \(a FIFO\); a catalog must be a plain YAML file")


def test_a_file_over_the_size_cap_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as f:
        f.write(f"tools:\n  search: {TOOL}\n".encode())
        f.truncate(8 * 2**20 + 1)  # MAX_CATALOG_BYTES + 1, sparse: costs no disk
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    assert str(caught.value) == f"{path}: too large: 8,388,609 bytes; the limit is 8,388,608 (MAX_CATALOG_BYTES)"


def test_a_directory_is_refused_as_no_regular_file(tmp_path):
    with pytest.raises(CatalogError) as caught:
        load_catalog(tmp_path)
    assert str(caught.value) == f"{tmp_path}: not a regular file (a directory); a catalog must be a plain YAML file"


# -- YAML that expands or nests without end ------------------------------------------------------

def bomb(levels: int, width: int = 9, indent: str = "      ") -> str:
    """Anchors a, b, c, ...: `a` is `width` scalars, each next one `width` aliases of the one before."""
    names = "abcdefghijklmnopqrstuvwxyz"[:levels]
    lines = [f"{indent}a: &a [{','.join(['l'] * width)}]"]
    lines += [f"{indent}{name}: &{name} [{','.join([f'*{before}'] * width)}]" for before, name in zip(names, names[1:])]
    return "\n".join(lines) + "\n"


@posix_only
def test_a_520_byte_alias_bomb_is_refused_at_once(tmp_path):
    """Nine levels of nine aliases: 387 million values once expanded. Quoting them in the message for a
    `description` that is no text hung until memory ran out; under `parameters` alone they loaded silently."""
    text = ("tools:\n  s:\n    cost_usd: 0\n    latency_ms: 1\n    capabilities: [s]\n    complexity: simple\n"
            "    parameters:\n" + bomb(9) + "    description: *i\n")
    assert len(text) <= 520
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    refused(load_in_child(path, timeout_s=20), path,
            r"FILE:\d+: tools\.s\.parameters\.[a-i]\.\d: more than [\d,]+ values once alias \*[a-i] is expanded \(MAX_CATALOG_NODES\)")


@posix_only
def test_a_426_byte_alias_bomb_gives_a_short_message(tmp_path):
    """Quoted whole in the message, eight levels made a 250 MB line."""
    anchors = ["&a [l, l, l, l, l, l, l, l, l]"] + [f"&{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefg", "bcdefgh")]
    text = f"tools:\n  s: {{cost_usd: 0, latency_ms: 1, capabilities: [s], complexity: simple, description: [{', '.join(anchors)}]}}\n"
    assert len(text) <= 426
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    refused(load_in_child(path, timeout_s=20), path, r"FILE:2: tools\.s\.description\.\d\.\d: more than [\d,]+ values once alias \*[a-h] is expanded \(MAX_CATALOG_NODES\)")


def test_an_alias_inside_what_it_names_is_refused():
    with pytest.raises(CatalogError, match=r"c\.yaml:2: tools\.s\.parameters\.x: alias \*p is used inside the value it names"):
        parse_catalog(f"tools:\n  s: &p {{cost_usd: 0, latency_ms: 1, capabilities: [s], complexity: simple, parameters: {{x: *p}}}}\n",
                      source="c.yaml")


@settings(max_examples=60, deadline=None)
@given(levels=st.integers(1, 12), width=st.integers(1, 9), where=st.sampled_from(["parameters", "description", "unknown", "match"]))
def test_alias_bombs_load_when_small_and_are_refused_when_large(levels, width, where):
    from otel_agent_eval.config.catalog import MAX_CATALOG_NODES

    anchors = bomb(levels, width, indent="      ")
    last = "*" + "abcdefghijklmnopqrstuvwxyz"[levels - 1]
    if where == "parameters":
        text = f"tools:\n  s:\n    cost_usd: 0\n    latency_ms: 1\n    capabilities: [s]\n    complexity: simple\n    parameters:\n{anchors}      enum: {last}\n"
    elif where == "description":
        text = f"tools:\n  s:\n    cost_usd: 0\n    latency_ms: 1\n    capabilities: [s]\n    complexity: simple\n    parameters:\n{anchors}    description: {last}\n"
    elif where == "unknown":
        text = f"tools:\n  s: {TOOL}\nextra:\n  x:\n{anchors}  y: {last}\n"
    else:
        text = f"tools:\n  s: {TOOL}\ntasks:\n  t:\n    capability: search\n    match:\n{anchors}      z: {last}\n"
    size = 1 + width  # values that a{levels-1} stands for, once expanded
    for _ in range(levels - 1):
        size = 1 + width * size
    try:
        parse_catalog(text, source="bomb.yaml")
    except CatalogError as exc:
        assert_one_clear_line(exc, "bomb.yaml")
        if size * 4 < MAX_CATALOG_NODES:  # all anchors and the last alias: under 3 * size
            assert "MAX_CATALOG" not in str(exc), f"{size:,} values are refused: {exc}"
    else:
        assert size < MAX_CATALOG_NODES
    if size > MAX_CATALOG_NODES:
        with pytest.raises(CatalogError, match=r"bomb\.yaml:\d+: [\w.]+: more than [\d,]+ values"):
            parse_catalog(text, source="bomb.yaml")


def nest(depth: int, shape: str) -> str:
    """A value `depth` levels deep."""
    if shape == "flow list":
        return "[" * depth + "1" + "]" * depth
    if shape == "flow mapping":
        return "{k: " * depth + "1" + "}" * depth
    return "\n" + "".join(f"{'  ' * (i + 4)}k{i}:\n" for i in range(depth - 1)) + f"{'  ' * (depth + 3)}k: 1"  # block, under `x:` at column 6


@settings(max_examples=40, deadline=None)
@given(depth=st.one_of(st.integers(55, 65), st.integers(1, 3_000)), shape=st.sampled_from(["flow list", "flow mapping", "block"]))
def test_nesting_loads_up_to_the_depth_limit_and_is_refused_beyond(depth, shape):
    from otel_agent_eval.config.catalog import MAX_CATALOG_DEPTH

    assume(shape != "block" or depth <= 300)
    text = f"tools:\n  s:\n    cost_usd: 0\n    latency_ms: 1\n    capabilities: [s]\n    complexity: simple\n    parameters:\n      x: {nest(depth, shape)}\n"
    total = 5 + depth  # the root, tools, s, parameters, `depth` collections and the scalar in them
    if total <= MAX_CATALOG_DEPTH:
        assert parse_catalog(text, source="deep.yaml").tool("s").parameters["x"]
    else:
        with pytest.raises(CatalogError) as caught:
            parse_catalog(text, source="deep.yaml")
        assert_one_clear_line(caught.value, "deep.yaml")
        assert re.match(rf"deep\.yaml:\d+: tools\.s\.parameters\.x(\.\w+)*(\.…)?: nested deeper than {MAX_CATALOG_DEPTH} levels", str(caught.value))


@posix_only
def test_a_hundred_thousand_levels_do_not_take_the_process_down(tmp_path):
    """libyaml's own composer recursed until the C stack overflowed (a segfault), after quadratic scanning."""
    path = tmp_path / "deep.yaml"
    path.write_text("tools: " + "[" * 100_000 + "]" * 100_000 + "\n")
    refused(load_in_child(path, timeout_s=20), path, r"FILE:1: tools(\.0)+\.…: nested deeper than 64 levels \(MAX_CATALOG_DEPTH\)")


# -- names YAML does not read as text -------------------------------------------------------------

@pytest.mark.parametrize("name,read_as", [("411", "a number"), ("on", "true/false"), ("off", "true/false"), ("1.5", "a number"),
                                          ("null", "null (no value)"), ("yes", "true/false"), ("2024-01-01", "a date")])
def test_a_tool_name_yaml_reads_as_no_text_is_refused(tmp_path, name, read_as):
    path = tmp_path / "names.yaml"
    path.write_text(f"tools:\n  search: {TOOL}\n  {name}: {TOOL}\n")
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    assert str(caught.value) == f'{path}:3: tools.{name}: the name {name} is read by YAML as {read_as}, not as text; put it in quotes: "{name}"'


@pytest.mark.parametrize("section,text", [
    ("profiles", "profiles:\n  on: {cost_weight: 0.5, latency_weight: 0.5}\n"),
    ("tasks", "tasks:\n  411: {capability: search}\n"),
    ("models", "models:\n  1.5: {input_per_1k: 0, output_per_1k: 0}\n"),
    ("thresholds", "thresholds:\n  null: {warn: 0.9, fail: 0.8}\n"),
    ("match", "tasks:\n  t:\n    capability: search\n    match: {off: x}\n"),
])
def test_profile_task_model_and_attribute_names_must_be_text(section, text):
    with pytest.raises(CatalogError, match=r"c\.yaml:\d+: [\w.]+: the name \S+ is read by YAML as .*, not as text; put it in quotes"):
        parse_catalog(f"tools:\n  search: {TOOL}\n{text}", source="c.yaml")


def test_an_alias_yaml_reads_as_no_text_gets_a_hint():
    with pytest.raises(CatalogError) as caught:
        parse_catalog("tools:\n  search: {cost_usd: 0, latency_ms: 1, capabilities: [s], complexity: simple, aliases: [on]}\n", source="c.yaml")
    assert str(caught.value) == 'c.yaml:2: tools.search.aliases.0: must be text, but YAML reads on as true/false; put it in quotes: "on"'


PLAIN_SCALARS = st.one_of(
    st.sampled_from(["411", "0", "-1", "0x1F", "0o17", "0b101", "1_000", "1.5", ".5", "1e3", "1.0e+3", ".nan", ".inf", "on", "Off", "YES",
                     "n", "y", "true", "False", "null", "Null", "~", "2024-01-01", "2001-12-14t21:59:43.10-05:00", "1:30", "<<", "="]),
    st.from_regex(r"[a-zA-Z0-9_.:+-]{1,12}", fullmatch=True),
)


@settings(max_examples=200, deadline=None)
@given(name=PLAIN_SCALARS)
def test_any_unquoted_tool_name_loads_as_that_text_or_is_refused_on_its_line(name):
    text = f"tools:\n  search: {TOOL}\n  {name}: {TOOL}\n"
    try:
        catalog = parse_catalog(text, source="c.yaml")
    except CatalogError as exc:
        assert_one_clear_line(exc, "c.yaml")
        assert exc.line in (2, 3), str(exc)
    else:
        assert name in catalog.tools and all(type(n) is str for n in catalog.tools), list(catalog.tools)
        assert_usable(catalog)


# -- numbers that are not finite ----------------------------------------------------------------

@pytest.mark.parametrize("text,where", [
    ("tools:\n  search: {cost_usd: .nan, latency_ms: 1, capabilities: [s], complexity: simple}\n", "2: tools.search.cost_usd"),
    ("tools:\n  search: {cost_usd: .inf, latency_ms: 1, capabilities: [s], complexity: simple}\n", "2: tools.search.cost_usd"),
    ("tools:\n  search: {cost_usd: 0, latency_ms: .Inf, capabilities: [s], complexity: simple}\n", "2: tools.search.latency_ms"),
    ("tools:\n  search: {cost_usd: 0, latency_ms: 1, latency_slo_ms: .NaN, capabilities: [s], complexity: simple}\n", "2: tools.search.latency_slo_ms"),
    (f"tools:\n  search: {TOOL}\nthresholds:\n  production: {{warn: .nan, fail: 0.5}}\n", "4: thresholds.production.warn"),
    (f"tools:\n  search: {TOOL}\nmodels:\n  m:\n    input_per_1k: .inf\n    output_per_1k: 0\n", "5: models.m.input_per_1k"),
    (f"tools:\n  search: {TOOL}\nmodels:\n  m: {{input_per_1k: 1.0e+400, output_per_1k: 0}}\n", "4: models.m.input_per_1k"),
    (f"tools:\n  search: {{cost_usd: 1{'0' * 400}, latency_ms: 1, capabilities: [s], complexity: simple}}\n", "2: tools.search.cost_usd"),
    (f"tools:\n  search: {TOOL}\ntasks:\n  t: {{capability: search, match: {{x: .nan}}}}\n", "4: tasks.t.match.x"),
])
def test_nan_and_infinities_are_refused_wherever_numeric(text, where):
    with pytest.raises(CatalogError) as caught:
        parse_catalog(text, source="c.yaml")
    assert str(caught.value).startswith(f"c.yaml:{where}: must be a finite number (got "), str(caught.value)
    assert_one_clear_line(caught.value, "c.yaml")


@settings(max_examples=200, deadline=None)
@given(cost=st.one_of(PLAIN_SCALARS, st.floats().map(repr), st.integers(-10**400, 10**400).map(str), st.just("9" * 5_000)))
def test_any_cost_loads_as_a_finite_number_or_is_refused(cost):
    try:
        catalog = parse_catalog(f"tools:\n  a: {TOOL}\n  b: {{cost_usd: {cost}, latency_ms: 5, capabilities: [search], complexity: simple}}\n",
                                source="c.yaml")
    except CatalogError as exc:
        assert_one_clear_line(exc, "c.yaml")
        assert exc.line == 3, str(exc)
    else:
        assert math.isfinite(catalog.tool("b").cost_usd)
        assert_usable(catalog)


# -- duplicate keys -----------------------------------------------------------------------------

@pytest.mark.parametrize("text,message", [
    (f"tools:\n  search: {TOOL}\n  search: {TOOL}\n", "c.yaml:3: tools.search: duplicate key (first on line 2)"),
    ("tools:\n  search:\n    cost_usd: 0\n    latency_ms: 1\n    cost_usd: 5\n    capabilities: [s]\n    complexity: simple\n",
     "c.yaml:5: tools.search.cost_usd: duplicate key (first on line 3)"),
    (f"tools:\n  a: {TOOL}\ntools:\n  b: {TOOL}\n", "c.yaml:3: tools: duplicate key (first on line 1)"),
    (f"tools:\n  search: {TOOL}\ntasks:\n  t: {{capability: search}}\n  t: {{capability: search}}\n", "c.yaml:5: tasks.t: duplicate key (first on line 4)"),
])
def test_duplicate_keys_are_refused_with_both_lines(text, message):
    with pytest.raises(CatalogError) as caught:
        parse_catalog(text, source="c.yaml")
    assert str(caught.value) == f"{message}; YAML would silently keep only the last one"


def test_a_merge_key_may_still_override_what_it_merges():
    catalog = parse_catalog(textwrap.dedent(f"""\
        tools:
          a: &base {TOOL}
          b: {{<<: *base, cost_usd: 0.5}}
        """))
    assert (catalog.tool("a").cost_usd, catalog.tool("b").cost_usd, catalog.tool("b").capabilities) == (0.001, 0.5, ("search",))


# -- every problem, in `check_catalog` and `catalog check` -------------------------------------------

MANY_PROBLEMS = textwrap.dedent("""\
    tools:
      search: {cost_usd: -1, latency_ms: 10, capabilities: [search], complexity: simple}
      on: {cost_usd: 0, latency_ms: .nan, capabilities: [search], complexity: huge}
      fetch: {cost_usd: 0, latency_ms: 10, capabilities: [search], complexity: simple}
      fetch: {cost_usd: 0, latency_ms: 10, capabilities: [search], complexity: simple}
    tasks:
      faq: {capability: search, optimal_tool: web_search, profile: thrifty}
    colour: red
    """)
MANY_MESSAGES = [
    "2: tools.search.cost_usd: must be >= 0 (got -1)",
    '3: tools.on: the name on is read by YAML as true/false, not as text; put it in quotes: "on"',
    "3: tools.on.latency_ms: must be a finite number (got .nan)",
    "3: tools.on.complexity: must be one of simple, moderate, advanced (got 'huge')",
    "5: tools.fetch: duplicate key (first on line 4); YAML would silently keep only the last one",
    "7: tasks.faq.profile: unknown profile 'thrifty'; known: balanced, cost_critical, latency_critical",
    "7: tasks.faq.optimal_tool: unknown tool 'web_search'; known tools: search, on, fetch",
    "8: colour: unknown key; expected one of: version, default_profile, default_environment, tools, profiles, thresholds, tasks, models, attribute_mapping, ignore_tools",
]


def test_check_catalog_lists_every_problem_in_file_order_and_load_raises_the_first():
    from otel_agent_eval.config.catalog import check_catalog

    problems = check_catalog(MANY_PROBLEMS, "c.yaml")
    assert sorted(map(str, problems)) == sorted(f"c.yaml:{m}" for m in MANY_MESSAGES)
    assert [p.line for p in problems] == sorted(p.line for p in problems)
    with pytest.raises(CatalogError) as caught:
        parse_catalog(MANY_PROBLEMS, source="c.yaml")
    assert str(caught.value) == str(problems[0])
    assert check_catalog(CATALOG) == []


@posix_only
def test_catalog_check_prints_every_problem_with_its_line_and_exits_2(tmp_path, capsys):
    from otel_agent_eval.tools.cli import main

    good, bad, fifo = tmp_path / "good.yaml", tmp_path / "bad.yaml", tmp_path / "fifo.yaml"
    good.write_text(CATALOG)
    bad.write_text(MANY_PROBLEMS)
    os.mkfifo(fifo)
    assert main(["catalog", "check", str(good), str(bad), str(fifo)]) == 2
    out, err = capsys.readouterr()
    assert out == f"{good}: ok (2 tools, 1 task)\n"
    assert sorted(err.splitlines()) == sorted([f"otel-agent-eval: {bad}:{m}" for m in MANY_MESSAGES]
                                              + [f"otel-agent-eval: {fifo}: not a regular file (a FIFO); a catalog must be a plain YAML file"])
    assert main(["catalog", "check", str(good)]) == 0


# -- random catalogs ---------------------------------------------------------------------------------

NASTY = ["411", "on", "off", "null", "~", "1.5", "2024-01-01", "2024-13-45", ".nan", "-.inf", "1.0e+400", "9" * 400, "9" * 5_000,
         "0x" + "f" * 300, "!!float x", "!!int 09", "!!bool maybe", "!!binary aGk=", "!!set {a}", "!!python/object:os.system", "!x y",
         "*nope", "&a 1", "&b [1, *b]", "[" * 200 + "]" * 200, "{" * 70 + "}" * 70, "{", "[", "'", '"\\x"', "-", "?", ":", "- a",
         "x" * 100_000, "[]", "{}", "''", "é", "\t", "<<: {a: 1}", "{<<: *nope}", "? [a]\n  : b"]


@st.composite
def mutated_catalog(draw) -> bytes:
    """The catalog above with one to three changes: words replaced by odd YAML, lines repeated, dropped,
    re-indented or given anchors and aliases, bytes that are not UTF-8."""
    lines = CATALOG.splitlines()
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["word", "word", "word", "repeat", "drop", "indent", "anchor", "bytes"]))
        words = list(re.finditer(r"[\w.*+-]+", lines[i]))
        if kind == "word" and words:
            word = draw(st.sampled_from(words))
            lines[i] = lines[i][:word.start()] + draw(st.sampled_from(NASTY)) + lines[i][word.end():]
        elif kind == "repeat":
            lines.insert(i, lines[i])
        elif kind == "drop" and len(lines) > 1:
            del lines[i]
        elif kind == "indent":
            lines[i] = draw(st.sampled_from(["", "  ", "    ", "\t"])) + lines[i].lstrip()
        elif kind == "anchor" and ": " in lines[i]:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i] = lines[i].replace(": ", ": &m ", 1)
            if ": " in lines[j] and j != i:
                key = lines[j].split(": ")[0]
                lines[j] = f"{key}: *m"
        elif kind == "bytes":
            return "\n".join(lines).encode() + draw(st.sampled_from([b"\xe9", b"\xff\xfe", b"\x00", b"\x1b[31m"]))
    return ("\n".join(lines) + "\n").encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(content=mutated_catalog())
def test_a_mutated_catalog_loads_as_a_usable_catalog_or_is_refused_in_one_line(content):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "catalog.yaml"
        path.write_bytes(content)
        try:
            catalog = load_catalog(path)
        except CatalogError as exc:
            assert_one_clear_line(exc, str(path))
        else:
            assert_usable(catalog)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(content=mutated_catalog())
def test_check_catalog_and_load_agree(content):
    from otel_agent_eval.config.catalog import check_catalog

    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return
    problems = check_catalog(text, "c.yaml")
    for problem in problems:
        assert_one_clear_line(problem, "c.yaml")
    try:
        parse_catalog(text, source="c.yaml")
    except CatalogError as exc:
        assert problems and str(exc) == str(problems[0])
    else:
        assert problems == []
