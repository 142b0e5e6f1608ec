"""`catalog draft`: a first catalog from recorded traces, or what a catalog lacks, added to it.

The traces go through `score_traces` (the live pipeline), so a tool, an agent or a model is
drafted exactly when scoring would meet it. What the spans tell is filled in: each tool the
catalog lacks, under its canonical name with the qualified names seen as aliases; its
description and `parameters` from the tool definitions spans carry; calls, error rate and
observed p50 (`latency_ms`) and p99 rounded up (`latency_slo_ms`); a task route for each agent
no route matches that called one tool per trace, listing the tools it used; the models seen,
with their tokens and whether a price is known. What they cannot tell (price, capabilities,
tier) is marked FILL IN, with values that score no call as wasteful, even once one tool has a
price: every price 0; each tool its own capability (its name), except that the tools of a
drafted route share its placeholder (the agent used one or another: maybe alternatives); and
the drafted routes on a cost-only profile (latency is not weighed between tools no one has
said can stand in for each other).

`merge_draft` adds to a user's catalog text without changing a byte of it: new entries are
inserted at the end of the sections they belong to, or appended as new sections.

    >>> draft = observe_traces(["traces.jsonl"])
    >>> print(render_draft(draft))
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from ..config.catalog import Catalog, check_catalog, load_catalog, parse_catalog, qualifier_free
from ..core import conventions as c
from ..core.recognize import ToolCallRecord, attribute_dict, convention_of
from ..core.runs import AgentRun
from ..core.scoring import UNKNOWN_OVERFLOW, CallScore
from ..core.tool_definitions import (GEN_AI_TOOL_DEFINITIONS, GEN_AI_TOOL_DESCRIPTION, OI_TOOL_DESCRIPTION,
                                     VERCEL_PROMPT_TOOLS, declared, definitions_in)
from .recorded import FileProblem, PathArg
from .report import OTHER, Report, ToolContextCost, commented_models
from .score import score_traces

__all__ = ["COST_ONLY_PROFILE", "FILL_IN", "Draft", "DraftError", "merge_draft", "observe_traces", "render_draft"]

FILL_IN = "FILL IN"  # the marker on every value the traces cannot tell
COST_ONLY_PROFILE = "cost_only"
COST_ONLY = {"cost_weight": 1.0, "latency_weight": 0.0}
MAX_MODELS = 1_000  # distinct model names drafted; a flood of names cannot grow the draft without bound
MAX_DESCRIPTION_CHARS = 500
# Where spans declare tools (beyond the tool span's own OpenInference `tool.parameters` / strands
# `gen_ai.tool.json_schema`, which the recognised call already reads): GenAI's definitions on the
# model call, the Vercel AI SDK's prompt tools, OpenInference's flattened `llm.tools.N.tool.json_schema`; parsed as
# `core.tool_definitions` parses them for the judge (which also reads agents' tool-name lists).
_OI_LLM_TOOL = re.compile(r"llm\.tools\.\d+\.tool\.json_schema\Z")


class DraftError(ValueError):
    """Bad input for a draft (no spans, no tool calls, a catalog that cannot take the merge): one line."""


@dataclass
class ToolSeen:
    name: str  # canonical: the name as called, less a qualifier when the plain name was seen too
    aliases: set[str] = field(default_factory=set)
    calls: int = 0
    errors: int = 0
    p50_s: float | None = None
    p99_s: float | None = None
    agents: set[str] = field(default_factory=set)  # agents whose drafted route lists it
    by_agent: dict[str, int] = field(default_factory=dict)  # calls per agent ("": no agent), for the `# seen:` comment
    capabilities: set[str] = field(default_factory=set)  # of the user's routes that routed its calls
    unrouted: bool = False  # called with no agent and no route, or by an agent that got no route: a capability of its own
    context: ToolContextCost | None = None  # what its results cost the later model calls (docs/true-cost.md), measured


@dataclass
class ModelSeen:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    priced: bool = False

    @property
    def costs_unknown(self) -> bool:
        """Unpriced and used tokens: a model whose calls used none costs nothing whatever its price."""
        return not self.priced and (self.input_tokens > 0 or self.output_tokens > 0)


@dataclass
class Draft:
    """What the traces tell about what `catalog` lacks."""

    catalog: Catalog | None  # the catalog merged into (None: a fresh draft)
    report: Report
    tools: dict[str, ToolSeen]
    routes: dict[str, list[str]]  # agent -> canonical tools it used (agents no route matched)
    models: dict[str, ModelSeen]
    definitions: dict[str, tuple[str, Mapping[str, Any] | None]]  # tool name -> (description, parameters)
    ignored_calls: int = 0  # calls of the catalog's ignore_tools (final_answer...), not drafted

    @property
    def missing(self) -> bool:
        return bool(self.tools or self.routes or any(m.costs_unknown for m in self.models.values()))


def observe_traces(paths: PathArg | Iterable[PathArg], catalog: Catalog | None = None,
                   on_problem: Callable[[FileProblem], None] | None = None) -> Draft:
    """Score the traces against `catalog` (None: against no tool at all) and collect what it lacks."""
    scoring = catalog if catalog is not None else _empty_catalog()
    definitions: dict[str, tuple[str, Mapping[str, Any] | None]] = {}
    span_schemas: dict[str, Mapping[str, Any]] = {}
    models: dict[str, ModelSeen] = {}
    together: set[str] = set()  # agents that called two different tools in one trace (one request's work)
    first_tool: dict[tuple[int, str], str] = {}  # (trace, agent) -> the first tool it called there
    ignored = [0]  # calls of the catalog's ignore_tools, which no report counts

    def on_span(span: ReadableSpan) -> None:
        attrs = attribute_dict(span)
        _read_definitions(attrs, definitions)
        if scoring.ignore_tools and convention_of(attrs, None, ()) is not None \
                and convention_of(attrs, None, scoring.ignore_tools) is None:
            ignored[0] += 1

    def on_call(record: ToolCallRecord, score: CallScore) -> None:
        if not score.static.known and record.name not in span_schemas:
            schema = record.parameters_schema
            if schema is not None:
                span_schemas[record.name] = schema

    def on_run(run: AgentRun) -> None:
        for record in run.tool_calls:
            name = qualifier_free(record.name) or record.name  # an alias is the same tool
            if first_tool.setdefault((run.trace_id, record.agent or ""), name) != name:
                together.add(record.agent or "")
        unpriced = set(run.evaluation.unpriced_models) if run.evaluation is not None else set()
        for call in run.llm_calls:
            if not call.model:
                continue
            seen = models.get(call.model)
            if seen is None:
                if len(models) >= MAX_MODELS:
                    continue
                seen = models[call.model] = ModelSeen()
            seen.calls += 1
            seen.input_tokens += call.input_tokens
            seen.output_tokens += call.output_tokens
            seen.priced = call.model not in unpriced

    report = score_traces(paths, scoring, on_span=on_span, on_call=on_call, on_run=on_run, on_problem=on_problem)
    if report.inputs.spans == 0:
        files = report.inputs.files
        raise DraftError(f"no spans could be read from {files} file{'s' if files != 1 else ''}")
    if report.calls == 0 and report.runs == 0:
        raise DraftError(f"no tool calls or agent runs in {report.inputs.spans:,} spans: none follows the GenAI, "
                         "OpenInference or OpenLLMetry conventions (or the catalog's attribute_mapping); nothing to draft")
    for name, schema in span_schemas.items():  # the tool span's own schema: what the tool was called with
        description, _ = definitions.get(name, ("", None))
        definitions[name] = (description, schema)
    tools, routes = _tools_and_routes(report, scoring, together)
    return Draft(catalog, report, tools, routes, models, definitions, ignored[0])


def _empty_catalog() -> Catalog:
    """The packaged catalog's profiles and thresholds with no tool and no route: every tool seen is one to draft."""
    import dataclasses

    return dataclasses.replace(load_catalog(), tools={}, tasks=(), models={}, _by_alias={}, source="<no catalog>")


def _tools_and_routes(report: Report, catalog: Catalog, together: set[str] = frozenset()  # type: ignore[assignment]
                      ) -> tuple[dict[str, ToolSeen], dict[str, list[str]]]:
    """The tools the catalog lacks, and a route for each agent no route matches whose tools look like alternatives.

    A route compares each call with one optimal tool, the best with its capability: tools that share
    the placeholder capability are each other's stand-ins, and once one has a price the others' calls
    are measured against it. So only an agent that called one tool per trace (never two in the work
    of one request) gets a route; an agent that used several tools in one trace used them for
    different jobs, and its tools each get a capability of their own (their calls score unrouted,
    each its own best choice).
    """
    names = {t.tool for g in report.groups for t in g.tools if not t.known and t.tool not in (UNKNOWN_OVERFLOW, OTHER)}
    canonical = {name: _canonical(name, names) for name in names}
    tools: dict[str, ToolSeen] = {}
    routes: dict[str, set[str]] = {}
    latency = {t.tool: t for t in report.tool_latency}
    for group in report.groups:
        route = catalog.task(group.task) if group.task else None
        for summary in group.tools:
            if summary.tool not in canonical:
                continue
            name = canonical[summary.tool]
            seen = tools.setdefault(name, ToolSeen(name))
            if summary.tool != name:
                seen.aliases.add(summary.tool)
            seen.calls += summary.calls
            seen.errors += summary.errors
            seen.by_agent[group.agent or ""] = seen.by_agent.get(group.agent or "", 0) + summary.calls
            if route is not None:
                seen.capabilities.add(route.capability)
            elif group.agent and group.agent != OTHER and group.agent not in together:
                seen.agents.add(group.agent)
                routes.setdefault(group.agent, set()).add(name)
            else:
                seen.unrouted = True
    context = {t.tool: t for t in report.tool_context}
    for name, seen in tools.items():  # latency over every name the tool was called by: the busiest name's
        measured = [latency[n] for n in (name, *seen.aliases) if n in latency and latency[n].p50_s is not None]
        if measured:
            busiest = max(measured, key=lambda t: t.calls)
            seen.p50_s, seen.p99_s = busiest.p50_s, busiest.p99_s
        costs = [context[n] for n in (name, *seen.aliases) if n in context and context[n].mean_usd is not None]
        if costs:  # its context cost as measured under its busiest name
            seen.context = max(costs, key=lambda t: t.calls)
    return tools, {agent: sorted(used) for agent, used in routes.items()}


def _canonical(name: str, names: set[str]) -> str:
    """A qualified name (`plugin-function`) is its function part when that was called too; else itself."""
    plain = qualifier_free(name)
    return plain if plain is not None and plain in names else name


# -- tool definitions carried by spans ----------------------------------------------------

def _read_definitions(attrs: Mapping[str, Any], out: dict[str, tuple[str, Mapping[str, Any] | None]]) -> None:
    description = attrs.get(GEN_AI_TOOL_DESCRIPTION) or attrs.get(OI_TOOL_DESCRIPTION)
    if isinstance(description, str) and description.strip():
        name = attrs.get(c.GEN_AI_TOOL_NAME) or attrs.get(c.OI_TOOL_NAME)
        if isinstance(name, str) and name:
            _remember(out, name, description, None)
    for key in (GEN_AI_TOOL_DEFINITIONS, VERCEL_PROMPT_TOOLS):
        value = attrs.get(key)
        if value is not None:
            for definition in definitions_in(value):
                _remember_definition(out, definition)
    if any(_OI_LLM_TOOL.match(k) for k in attrs):
        for key in sorted(k for k in attrs if _OI_LLM_TOOL.match(k)):
            for definition in definitions_in(attrs[key]):
                _remember_definition(out, definition)


def _remember_definition(out: dict[str, tuple[str, Mapping[str, Any] | None]], definition: Mapping[str, Any]) -> None:
    found = declared(definition)
    if found is not None:
        _remember(out, *found)


def _remember(out: dict[str, tuple[str, Mapping[str, Any] | None]], name: str, description: str,
              schema: Mapping[str, Any] | None) -> None:
    """The first description and the first schema seen for a tool (the same traces give the same draft)."""
    old_description, old_schema = out.get(name, ("", None))
    out[name] = (old_description or description.strip(), old_schema if old_schema is not None else _usable_schema(schema))


def _usable_schema(schema: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """`schema` if a catalog would take it as `parameters` (a valid JSON Schema that YAML can hold), else None."""
    if schema is None:
        return None
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    schema = {k: v for k, v in schema.items() if k != "$schema"}
    try:
        Draft202012Validator.check_schema(schema)
        _flow(schema)  # numbers that are not finite cannot be written
    except (SchemaError, ValueError, RecursionError):
        return None
    return schema


# -- YAML text ---------------------------------------------------------------------------

# control characters, and the bidi controls that make an editor show text reordered (never written raw)
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufeff\ufffe\uffff\u2028\u2029\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069]")


def _text(value: str) -> str:
    """`value` as a YAML double-quoted scalar (JSON's quoting, which YAML reads the same), one line."""
    quoted = json.dumps(value, ensure_ascii=False)
    return _UNSAFE.sub(lambda m: "\\ufffd" if 0xD800 <= ord(m.group()) <= 0xDFFF else f"\\u{ord(m.group()):04x}", quoted)


def _key(value: str) -> str:
    """A mapping key: plain when YAML surely reads it back as the same text, else quoted."""
    return value if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-/]*", value) and value.lower() not in _YAML_WORDS else _text(value)


_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"})


def _number(value: float) -> str:
    """A number YAML 1.1 reads back as a number (its floats need a dot and a signed exponent)."""
    if isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"not a finite number: {value!r}")
    if isinstance(value, int):
        return str(value)
    text = repr(float(value))
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent if exponent[0] in '+-' else '+' + exponent}"
    return text


def _flow(value: Any) -> str:
    """A JSON-like value in YAML flow style, on one line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _number(value)
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_text(str(k))}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    raise ValueError(f"cannot be written: {type(value).__name__}")


def _ms(seconds: float) -> str:
    ms = seconds * 1000
    return _number(round(ms) if ms >= 10 else round(ms, 2))


def _ms_up(seconds: float) -> str:
    """`_ms` rounded up, for a suggested SLO: the calls it was drafted from never breach it."""
    ms = seconds * 1000
    return _number(math.ceil(ms) if ms >= 10 else math.ceil(round(ms * 100, 6)) / 100)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def _by(by_agent: Mapping[str, int]) -> str:
    """Who made the calls, counted truthfully: ` by a`, or ` (4 by a, 5 with no agent)` when several made them."""
    if len(by_agent) == 1:
        agent = next(iter(by_agent))
        return f" by {_key(agent)}" if agent else " with no agent"
    parts = sorted(by_agent.items(), key=lambda item: (item[0] == "", -item[1], item[0]))
    return " (" + ", ".join(f"{n:,} by {_key(agent)}" if agent else f"{n:,} with no agent" for agent, n in parts) + ")"


def placeholder_capability(agent: str) -> str:
    return f"used_by_{agent}"


def _tool_lines(seen: ToolSeen, description: str, schema: Mapping[str, Any] | None, indent: str) -> list[str]:
    rate = f"{100 * seen.errors / seen.calls:.0f}%" if seen.calls else "-"
    observed = f"p50 {_ms(seen.p50_s)} ms, p99 {_ms(seen.p99_s)} ms" if seen.p50_s is not None and seen.p99_s is not None else "no duration recorded"
    by = _by(seen.by_agent)
    capabilities = sorted({*seen.capabilities, *(placeholder_capability(a) for a in seen.agents), *([seen.name] if seen.unrouted else [])})
    inner = indent * 2
    lines = [f"{indent}{_key(seen.name)}:",
             f"{inner}# seen: {_plural(seen.calls, 'call')}{by}, {_plural(seen.errors, 'error')} ({rate} error rate); {observed}"]
    if description:
        lines.append(f"{inner}description: {_text(description[:MAX_DESCRIPTION_CHARS])}")
    lines.append(f"{inner}cost_usd: 0.0  # {FILL_IN}: the price of one call in USD (0: no call counts as wasted money)")
    lines += _context_lines(seen.context, inner)
    if seen.p50_s is not None:
        lines.append(f"{inner}latency_ms: {_ms(seen.p50_s)}  # observed p50")
        if seen.p99_s is not None and seen.p99_s > 0:
            lines.append(f"{inner}latency_slo_ms: {_ms_up(seen.p99_s)}  # suggested: observed p99, rounded up")
    else:
        lines.append(f"{inner}latency_ms: 0  # {FILL_IN}: no duration was recorded")
    lines.append(f"{inner}capabilities: {_flow(capabilities)}  # {FILL_IN}: what it can do; tools that can stand in for "
                 "each other share a capability")
    lines.append(f"{inner}complexity: simple  # {FILL_IN}: simple, moderate or advanced")
    if seen.aliases:
        lines.append(f"{inner}aliases: {_flow(sorted(seen.aliases))}")
    if schema is not None:
        lines.append(f"{inner}parameters: {_flow(schema)}")
    return lines


def _context_lines(context: ToolContextCost | None, inner: str) -> list[str]:
    """`context_usd`: the mean cost of the input tokens a call's result added to the later model calls of its
    run, as measured (docs/true-cost.md), with its p50 and the model it was measured on: the tool's true cost per call
    is cost_usd plus this, and tools that share a capability are ranked by it."""
    if context is None or context.mean_usd is None or not context.induced_tokens:
        return []  # unmeasured, unpriced, or its results fed no later model call
    mean = float(f"{context.mean_usd:.3g}")
    p50 = f"; p50 ${context.p50_usd:.3g}" if context.p50_usd is not None else ""
    model = f", on {_text(context.model)}" if context.model else ""
    return [f"{inner}context_usd: {_number(mean)}  # measured, the mean per call{p50} ({_plural(context.calls, 'call')}, "
            f"{context.induced_tokens / context.calls:,.0f} input tokens per call{model}); true cost = cost_usd + this"]


def _route_lines(name: str, agent: str, tools: list[str], profile: str, indent: str) -> list[str]:
    inner = indent * 2
    return [f"{indent}{_key(name)}:",
            f"{inner}description: {_text(f'Drafted: the calls of agent {agent}. {FILL_IN}: what the task is')}",
            f"{inner}match: {{gen_ai.agent.name: {_text(agent)}}}",
            f"{inner}capability: {_text(placeholder_capability(agent))}  # {FILL_IN}: the capability the task needs",
            f"{inner}profile: {profile}  # {FILL_IN}: balanced (or your own) once prices, capabilities and latencies are set",
            f"{inner}# acceptable_tools: {_flow(tools)}  # the tools it used; {FILL_IN}: uncomment those fine for the task"]


def _model_lines(models: Mapping[str, ModelSeen], indent: str) -> list[str]:
    lines = []
    for name in sorted(models):
        seen = models[name]
        tokens = f"{_plural(seen.calls, 'call')}, {seen.input_tokens:,} input and {seen.output_tokens:,} output tokens"
        if seen.priced:  # a comment that stays one when the lines are uncommented
            lines.append(f"# {indent}# {_key(name)}: price known ({tokens})")
        else:
            lines.append(f"# {indent}{_key(name)}: {{input_per_1k: 0.0, output_per_1k: 0.0}}  # {FILL_IN}: price unknown; {tokens}")
    return lines


_HEADER = """\
# Tool catalog DRAFTED by `otel-agent-eval catalog draft` from {inputs}.
#
# What the traces tell is filled in: each tool with its aliases, description and parameters (from the
# tool definitions the spans carry), its observed latency (p50 as latency_ms, p99 as latency_slo_ms),
# and a task for each agent that called one tool per trace, matching the agent, listing the tools it
# used (commented: acceptable_tools).
# What they cannot tell is marked FILL IN, with values that score no call as wasteful:
#   cost_usd 0.0 (no call counts as wasted money); capabilities: a tool's own name, so it is its own
#   best choice, except that the tools of a drafted task share its placeholder (used_by_<agent>): its
#   traces used one or another, so they may stand in for each other (a price set on one measures the
#   others' calls against it); an agent that called several tools in one trace used them for
#   different jobs and gets no task; complexity simple; the drafted tasks use the profile cost_only (latency is
#   not weighed: no one has said yet which tools can stand in for each other).
# Measured, not to fill in: context_usd, what a call's result costs the later model calls of its run as
#   input tokens (docs/true-cost.md). Tools that share a capability are ranked by cost_usd + context_usd.
# First say which tools can stand in for each other (a shared capability), then fill in prices
# (grep "FILL IN"), then set each task's profile to balanced to weigh latency too.
# Check it: otel-agent-eval catalog check FILE.  Add tools seen later: otel-agent-eval catalog draft TRACES --merge FILE.
"""


def _inputs(report: Report) -> str:
    inputs = report.inputs
    return (f"{_plural(inputs.spans, 'span')} in {_plural(inputs.files, 'file')} ({_plural(report.calls, 'tool call')}, "
            f"{_plural(report.runs, 'agent run')})")


def render_draft(draft: Draft) -> str:
    """A fresh catalog: the header, the tools, the cost_only profile, the tasks and the models seen (commented)."""
    if not draft.tools:
        if draft.ignored_calls:
            raise DraftError(f"no tool calls to draft: every call in the traces ({_plural(draft.ignored_calls, 'call')}) "
                             "is of an ignored tool (the catalog's ignore_tools)")
        raise DraftError(f"no tool calls to draft: the traces hold {_plural(draft.report.runs, 'agent run')} "
                         "but no tool call")
    indent = "  "
    lines = [_HEADER.format(inputs=_inputs(draft.report)), "version: 1", "", "tools:"]
    for name in sorted(draft.tools):
        description, schema = _definition(draft, name)
        lines += _tool_lines(draft.tools[name], description, schema, indent)
    lines += ["", "profiles:",
              f"{indent}{COST_ONLY_PROFILE}: {{cost_weight: 1.0, latency_weight: 0.0, description: \"Drafted: cost alone, until "
              "capabilities say which tools can stand in for each other\"}"]
    if draft.routes:
        lines += ["", "# Task routes, tried in order: the first whose match fits a call wins.", "tasks:"]
        for agent in sorted(draft.routes):
            lines += _route_lines(agent, agent, draft.routes[agent], COST_ONLY_PROFILE, indent)
    if draft.models:
        lines += ["", f"# LLM models seen, in USD per 1k tokens. {FILL_IN} the prices not known, then uncomment these lines:",
                  "# models:", *_model_lines(draft.models, indent)]
    return _checked("\n".join(lines) + "\n", "<draft>")


def _definition(draft: Draft, name: str) -> tuple[str, Mapping[str, Any] | None]:
    """The definition of a tool under its own name, else under one of its aliases."""
    seen = draft.tools[name]
    description, schema = "", None
    for candidate in (name, *sorted(seen.aliases)):
        d, s = draft.definitions.get(candidate, ("", None))
        description, schema = description or d, schema if schema is not None else s
    return description, schema


def _checked(text: str, source: str) -> str:
    problems = check_catalog(text, source)
    if problems:  # a bug here, never a broken file written
        raise DraftError(f"the drafted catalog does not pass its own check: {problems[0]}")
    return text


# -- merging into the user's text -----------------------------------------------------------

_TOP_KEY = re.compile(r"([^\s#][^:#]*?|\"[^\"]*\"|'[^']*'):(?:[ \t]+(.*?))?[ \t]*(?:#.*)?\Z")


def merge_draft(text: str, draft: Draft, source: str = "<catalog>") -> tuple[str, list[str]]:
    """`text` with what `draft` found missing added, and a list of what was added ("3 tools: a, b, c").

    The user's text is never changed: lines are only inserted, at the end of the section they
    belong to (`tools:`, `profiles:`, `tasks:`, `models:` written as block mappings at the top), or
    appended as new sections. A section written another way (flow style `tools: {...}`) cannot take
    an insertion: `DraftError` says so.
    """
    catalog = parse_catalog(text, source=source)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"  # inserted after it: the file's last line ends first
    if any(line.rstrip() in ("---", "...") for line in lines[1:]):
        raise DraftError(f"{source}: more than one YAML document (--- or ...): cannot add to it")
    sections = _sections(lines)
    inserts: dict[str, list[str]] = {}
    added: list[str] = []
    indent = _indent(lines, sections)
    if draft.tools:
        tool_lines = []
        for name in sorted(draft.tools):
            description, schema = _definition(draft, name)
            tool_lines += _tool_lines(draft.tools[name], description, schema, indent)
        inserts["tools"] = tool_lines
        added.append(f"{_plural(len(draft.tools), 'tool')}: {', '.join(sorted(draft.tools))}")
    profile = COST_ONLY_PROFILE
    if draft.routes:
        existing = catalog.profiles.get(profile)
        if existing is None or (existing.cost_weight, existing.latency_weight) != (1.0, 0.0):
            if existing is not None:
                profile = next(f"{COST_ONLY_PROFILE}_{i}" for i in range(2, 1000) if f"{COST_ONLY_PROFILE}_{i}" not in catalog.profiles)
            inserts["profiles"] = [f"{indent}{profile}: {{cost_weight: 1.0, latency_weight: 0.0, description: \"Drafted: cost "
                                   "alone, until capabilities say which tools can stand in for each other\"}"]
        taken = {r.name for r in catalog.tasks}
        route_lines = []
        for agent in sorted(draft.routes):
            name = agent if agent not in taken else next(f"{agent}_{i}" for i in range(2, 10**6) if f"{agent}_{i}" not in taken)
            taken.add(name)
            route_lines += _route_lines(name, agent, draft.routes[agent], profile, indent)
        inserts["tasks"] = route_lines
        added.append(f"{_plural(len(draft.routes), 'task')}: {', '.join(sorted(draft.routes))}")
    named = set(commented_models(text, (m for m, s in draft.models.items() if s.costs_unknown)))
    unpriced = {m: s for m, s in draft.models.items()  # not those a drafted comment already names
                if s.costs_unknown and m not in named}
    if unpriced:
        inserts["models"] = _model_lines(unpriced, indent)
        added.append(f"{_plural(len(unpriced), 'unpriced model')} (commented, to fill in): {', '.join(sorted(unpriced))}")
    if not inserts:
        return text, []
    merged = _insert(lines, sections, inserts, source)
    return _checked(merged, source), added


def _sections(lines: list[str]) -> dict[str, tuple[int, int, str]]:
    """Top-level key -> (line index of the key, index after its block's last indented line, the value on the key's line)."""
    keys: list[tuple[str, int, str]] = []
    for i, line in enumerate(lines):
        body = line.rstrip("\r\n")
        if body and body[0] not in " \t#" and body not in ("---", "..."):
            m = _TOP_KEY.match(body)
            if m is not None:
                keys.append((m.group(1).strip("\"'"), i, m.group(2) or ""))
    out = {}
    for n, (key, start, value) in enumerate(keys):
        stop = keys[n + 1][1] if n + 1 < len(keys) else len(lines)
        end = start + 1
        for i in range(start + 1, stop):
            body = lines[i].rstrip("\r\n")
            if body.strip() and body[0] in " \t":
                end = i + 1
        out[key] = (start, end, value)
    return out


def _indent(lines: list[str], sections: Mapping[str, tuple[int, int, str]]) -> str:
    """The indentation of the entries of the user's `tools:` (two spaces when there is none to copy)."""
    start, end, _ = sections.get("tools", (0, 0, ""))
    for line in lines[start + 1:end]:
        stripped = line.lstrip(" ")
        if stripped.strip() and not stripped.startswith("#"):
            return line[:len(line) - len(stripped)] or "  "
    return "  "


def _insert(lines: list[str], sections: Mapping[str, tuple[int, int, str]], inserts: Mapping[str, list[str]], source: str) -> str:
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    at: dict[int, list[str]] = {}
    appended: list[str] = []
    for key in ("tools", "profiles", "tasks", "models"):
        new = inserts.get(key)
        if not new:
            continue
        if key in sections:
            start, end, value = sections[key]
            if value and not value.startswith(("#", "&")):
                raise DraftError(f"{source}:{start + 1}: {key}: written on one line ({value[:40]}): cannot add to it; "
                                 f"write it as a block (one entry per line), or add the drafted entries by hand")
            at.setdefault(end, []).extend(new)
        elif key == "models":
            appended += ["", f"# LLM models seen, in USD per 1k tokens. {FILL_IN} the prices not known, then uncomment these lines:",
                         "# models:", *new]
        else:
            appended += ["", f"{key}:", *new]
    out: list[str] = []
    for i, line in enumerate(lines):
        out.extend(f"{x}{newline}" for x in at.get(i, ()))
        out.append(line)
    out.extend(f"{x}{newline}" for x in at.get(len(lines), ()))
    if appended:
        out.append(newline)
        out.append(f"# Drafted by `otel-agent-eval catalog draft`: values marked {FILL_IN} are for you to set.{newline}")
        out.extend(f"{x}{newline}" for x in appended[1:])
    return "".join(out)
