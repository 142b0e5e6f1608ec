"""What one judgement needs, built from a closed agent run, redacted before anything leaves the process.

A judge sends the run's task input, its tool calls (arguments and results) and the tools the agent had
to a model: it exports content as an exporter does, so the run's redaction applies first and fails
closed (a value it cannot mask is not sent). `available_tools` (deepeval's name) are what the agent
could choose from: the tools the run's spans declared (`core.tool_definitions`), else the catalog's;
each described by its span or catalog description and capabilities, with its argument schema.

    >>> request = request_of(run, route, catalog, redactor=redactor)
    >>> [tool.name for tool in request.available_tools]
    ['local_index', 'web_search']
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.run_text import run_input, run_output
from ..core.tool_definitions import ToolDefinition, read_definitions

if TYPE_CHECKING:
    from ..config.catalog import Catalog, TaskRoute, Tool
    from ..core.recognize import ToolCallRecord
    from ..core.redact import Redactor
    from ..core.runs import AgentRun

__all__ = ["MAX_AVAILABLE_TOOLS", "MAX_TEXT_CHARS", "JudgeRequest", "available_tools_of", "judge_redactor", "request_of"]

logger = logging.getLogger(__name__)

MAX_AVAILABLE_TOOLS = 100  # tools described to the judge per run; the called ones always among them
MAX_TEXT_CHARS = 4_000  # of the task input and of each tool result sent to the judge: the prompt's cost is bounded
TRUNCATED = " [truncated]"


@dataclass(frozen=True)
class JudgeRequest:
    """What one judgement needs; built from a closed agent run, redacted already."""

    trace_id: int
    span_id: int  # the run's span: the evaluation event is parented to it
    agent: str | None
    task: str | None  # the catalog route's task name, when routed
    input: str | None  # the task input as recorded, None when not captured
    tools_called: tuple[Any, ...]  # deepeval ToolCall objects, in call order
    available_tools: tuple[Any, ...]  # deepeval ToolCall objects (name, description, input schema)
    expected_tools: tuple[Any, ...] = ()
    # additive
    actual_output: str | None = None  # the run's final answer, redacted; None when not captured
    arguments_recorded: bool = False  # some call carries its arguments: the argument judge can run


def judge_redactor(pattern: str | None = None, drop_tool_io: bool = False) -> Redactor:
    """The redaction a judge applies: `pattern` (the processor's `redact_keys`), else the common secret keys
    (`config.settings.FAIL_CLOSED`'s: passwords, tokens, API keys, credentials, cookies...); `drop_tool_io`
    sends no tool arguments or results at all. A judge never sends content unredacted."""
    from ..config.settings import FAIL_CLOSED, FailClosed, usable_redaction
    from ..core.redact import Redactor

    usable = usable_redaction(pattern, "judge redact_keys") if pattern is not None else None
    drop = drop_tool_io or isinstance(usable, FailClosed)  # a pattern that cannot be used fails closed
    return Redactor(str(usable) if usable is not None else str(FAIL_CLOSED), drop)


def request_of(run: AgentRun, route: TaskRoute | None, catalog: Catalog | None, *,
               redactor: Redactor | None = None, declared: Mapping[str, ToolDefinition] | None = None,
               max_available: int = MAX_AVAILABLE_TOOLS) -> JudgeRequest:
    """The judge's request for `run`, routed by `route` (None: unrouted) against `catalog`.

    `declared` adds tool definitions read from spans the run does not hold (offline, every span of the
    trace: the model calls' `gen_ai.tool.definitions`); the run's root span and tool spans are read here.
    Content goes through `redactor` (None: sent as recorded): with `drop_io` no arguments or results
    are sent at all; a value it cannot mask is left out.
    """
    from deepeval.test_case import ToolCall

    called = [_called(record, redactor, ToolCall) for record in run.tool_calls]
    expected = route.expected_tools if route is not None and route.expected_tools else run.expected_tools
    text = _clip(_redacted_text(run_input(run), redactor))
    output = _clip(_redacted_text(run_output(run), redactor))
    return JudgeRequest(
        trace_id=run.trace_id,
        span_id=run.root_span_id,
        agent=run.agent,
        task=(route.name if route is not None else run.task) or None,
        input=text or None,
        tools_called=tuple(called),
        available_tools=tuple(available_tools_of(run, catalog, declared=declared, redactor=redactor,
                                                 max_available=max_available)),
        expected_tools=tuple(ToolCall(name=name) for name in expected),
        actual_output=output or None,
        arguments_recorded=any(call.input_parameters is not None for call in called),
    )


def available_tools_of(run: AgentRun, catalog: Catalog | None, *,
                       declared: Mapping[str, ToolDefinition] | None = None, redactor: Redactor | None = None,
                       max_available: int = MAX_AVAILABLE_TOOLS) -> list[Any]:
    """deepeval `ToolCall`s for the tools `run`'s agent could choose from, sorted by name.

    The tools its spans list when they list any (a model call's or the agent span's definitions: what the
    model was offered), else the catalog's tools (less its `ignore_tools`); with the tools it called in either
    case. Descriptions come from the spans (the listing, else the tool's own span), else the catalog (with the
    tool's capabilities); the argument schema likewise. At most `max_available`, the called tools first kept.
    """
    from deepeval.test_case import ToolCall

    listed: dict[str, ToolDefinition] = {}  # the tools offered, as a model call or the agent span lists them
    read_definitions(run.root_attributes, listed)
    for name, definition in (declared or {}).items():
        _merge(listed, definition)
    described: dict[str, ToolDefinition] = {}  # a tool span's own description and schema: its tool, no others
    for record in run.tool_calls:
        read_definitions(_attrs_of(record), described)
        schema = _safe_schema(record)
        if schema is not None:
            _merge(described, ToolDefinition(record.name, "", schema))
    found = dict(described)
    for definition in listed.values():
        _merge(found, definition, first=True)
    called_names = list(dict.fromkeys(record.name for record in run.tool_calls))
    ignore = catalog.ignore_tools if catalog is not None else frozenset()
    if listed:
        names = list(listed)
    else:
        names = [name for name in (catalog.tools if catalog is not None else {}) if name not in ignore]
    names = [n for n in dict.fromkeys([*called_names, *sorted(names)]) if n not in ignore]
    if len(names) > max_available:
        logger.debug("run %032x: %d available tools, the first %d described to the judge",
                     run.trace_id, len(names), max_available)
        names = names[:max_available]
    tools = []
    for name in sorted(names):
        tool = catalog.tool(name) if catalog is not None else None
        definition = found.get(name)
        description = _description(definition, tool)
        schema = definition.schema if definition is not None and definition.schema is not None else (
            tool.parameters if tool is not None else None)
        tools.append(ToolCall(name=name, description=_redacted_text(description, redactor) or None,
                              input_parameters=dict(schema) if isinstance(schema, Mapping) else None))
    return tools


def _merge(out: dict[str, ToolDefinition], definition: ToolDefinition, *, first: bool = False) -> None:
    """Add `definition` to `out`: what `out` holds wins (or `definition`'s, with `first`), the other fills its gaps."""
    old = out.get(definition.name)
    if old is None:
        out[definition.name] = definition
        return
    a, b = (definition, old) if first else (old, definition)
    out[definition.name] = ToolDefinition(definition.name, a.description or b.description,
                                          a.schema if a.schema is not None else b.schema)


def _description(definition: ToolDefinition | None, tool: Tool | None) -> str:
    """The span's description, else the catalog's; the catalog's capabilities after either."""
    text = (definition.description if definition is not None else "") or (tool.description if tool is not None else "")
    if tool is not None and tool.capabilities:
        capabilities = ", ".join(tool.capabilities)
        text = f"{text} (capabilities: {capabilities})" if text else f"Capabilities: {capabilities}."
    return text


def _called(record: ToolCallRecord, redactor: Redactor | None, tool_call: type) -> Any:
    """The call as the judge sees it: name, arguments and result, redacted (fail closed)."""
    arguments = record.arguments
    output = record.output
    if redactor is not None:
        if redactor.drop_io:
            arguments, output = None, None
        else:
            arguments = _redacted_mapping(arguments, redactor)
            output = _redacted_text(output, redactor)
    if isinstance(output, str):
        output = _clip(output)
    elif output is not None and not isinstance(output, (int, float, bool, Mapping, list)):
        output = _clip(str(output))
    return tool_call(name=record.name, input_parameters=arguments, output=output)


def _redacted_mapping(value: Mapping[str, Any] | None, redactor: Redactor) -> dict[str, Any] | None:
    """The arguments masked by `redactor`; None (not sent) when masking gave anything but a mapping."""
    if value is None:
        return None
    masked = redactor.text(value)
    return dict(masked) if isinstance(masked, Mapping) else None


def _redacted_text(value: Any, redactor: Redactor | None) -> Any:
    if redactor is None or value is None or value == "":
        return value
    return redactor.text(value)


def _clip(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_TEXT_CHARS:
        return value[:MAX_TEXT_CHARS] + TRUNCATED
    return value


def _attrs_of(record: ToolCallRecord) -> Mapping[str, Any]:
    """The tool span's attributes the record was read from (they hold its description)."""
    attrs = getattr(record, "_attrs", None)
    return attrs if isinstance(attrs, Mapping) else {}


def _safe_schema(record: ToolCallRecord) -> Mapping[str, Any] | None:
    try:
        return record.parameters_schema
    except Exception:  # noqa: BLE001 - a schema that cannot be read is no schema
        return None
