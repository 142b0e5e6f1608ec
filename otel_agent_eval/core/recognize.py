"""Recognise tool-call spans of any supported convention and read them into records.

    >>> record = tool_call_from_span(span)          # None for a span that is no tool call
    >>> record.name, record.arguments, record.duration_s
    ('web_search', {'query': 'return policy'}, 0.412)
    >>> record.tool_call                             # a deepeval ToolCall
    ToolCall(name="web_search", ...)

Arguments that the span does not carry (frameworks leave them out unless content capture
is turned on), or carries in a string too large to read (over `MAX_ARGUMENT_CHARS`), are
unknown, not empty: `record.arguments` is None and `record.arguments_captured` False.
Where a framework keeps them elsewhere in its default settings, they are read from there:
strands-agents' `gen_ai.tool.message` span event (`content`), google-adk's legacy
`gcp.vertex.agent.tool_call_args`. Attribute values that are `str` subclasses (enums) read
as their text. Framework-internal tools (`ignored`, the catalog's `ignore_tools`) are no
tool calls of the agent.

This runs inside `span.end()`: a span that is not a tool call costs a few dict
look-ups, and a tool span's arguments are parsed only when first read.
"""
from __future__ import annotations

import ast
import json
import re
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import SpanContext, StatusCode

from . import conventions as c
from .prices import provider_of, reported_cost
from .token_usage import token_counts
from ..config.catalog import DEFAULT_IGNORE_TOOLS, AttributeMapping

if TYPE_CHECKING:
    from deepeval.test_case import ToolCall
    from opentelemetry.sdk.trace import ReadableSpan

MAX_ARGUMENT_CHARS = 64 * 1024  # larger argument strings are not parsed
UNKNOWN_ERROR_TYPE = "_OTHER"  # OTel semconv fallback for error.type
MAX_NAME_CHARS = 256  # longer tool and agent names are cut: they become cache keys and label values
MAX_DURATION_NS = 10**15  # 11.6 days: a longer "duration" is a broken clock, not a tool call
MAX_DERIVED_NAME_CHARS = 64  # an agent name read from a span name: longer is a sentence, not a name
_NAME_LIKE = re.compile(r"[^\W\d][\w.:\-]*\Z")  # an identifier, maybe dotted or dashed: no spaces, no sentence

# Framework attributes beyond the GenAI semantic conventions, read on GenAI tool spans.
# strands-agents (strands/telemetry/tracer.py, Tracer.start_tool_call_span) puts a tool's input only in a span
# event, `gen_ai.tool.message` {role: "tool", content: <JSON of the input>, id}, unless
# OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental; and its schema in `gen_ai.tool.json_schema`
# (strands/tools/executors/_executor.py, _start_tool_telemetry).
STRANDS_TOOL_MESSAGE_EVENT = "gen_ai.tool.message"
STRANDS_TOOL_JSON_SCHEMA = "gen_ai.tool.json_schema"
# google-adk (google/adk/telemetry/tracing.py, trace_tool_call), legacy schema (ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1):
# the arguments in `gcp.vertex.agent.tool_call_args`, or the placeholder "{}" (with `tool_response` "{}" too) when
# ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS is off. Its `execute_tool (merged)` span (trace_merged_tool_calls, tool
# name "(merged tools)", args "N/A") only groups the responses of parallel calls, each traced on its own span.
ADK_TOOL_CALL_ARGS = "gcp.vertex.agent.tool_call_args"
ADK_TOOL_RESPONSE = "gcp.vertex.agent.tool_response"
ADK_MERGED_TOOLS = "(merged tools)"
_ADK_NO_CONTENT = "{}"


class _Convention(NamedTuple):
    """Where one convention keeps each field; the first key present wins."""

    name: str
    tool_name: tuple[str, ...]
    arguments: tuple[str, ...]
    result: tuple[str, ...]
    call_id: tuple[str, ...]
    agent: tuple[str, ...]
    tool_type: tuple[str, ...] = (c.GEN_AI_TOOL_TYPE,)
    schema: tuple[str, ...] = ()
    argument_events: tuple[tuple[str, str], ...] = ()  # (event name, attribute): arguments kept in a span event
    arguments_are_json: bool = True  # plain text arguments are a problem only where JSON is specified
    bound_calls: bool = False  # arguments may come as a bound call {"args": [], "kwargs": {...}} (OpenInference)


GENAI = _Convention(
    c.GENAI,
    tool_name=(c.GEN_AI_TOOL_NAME,),
    arguments=(c.GEN_AI_TOOL_CALL_ARGUMENTS, ADK_TOOL_CALL_ARGS, c.GEN_AI_TOOL_ARGS),
    result=(c.GEN_AI_TOOL_CALL_RESULT,),
    call_id=(c.GEN_AI_TOOL_CALL_ID,),
    agent=(c.GEN_AI_AGENT_NAME,),
    schema=(STRANDS_TOOL_JSON_SCHEMA,),
    argument_events=((STRANDS_TOOL_MESSAGE_EVENT, "content"),),
)
OPENINFERENCE = _Convention(
    c.OPENINFERENCE,
    tool_name=(c.OI_TOOL_NAME, c.GEN_AI_TOOL_NAME),
    arguments=(c.OI_INPUT_VALUE, c.GEN_AI_TOOL_CALL_ARGUMENTS),
    result=(c.OI_OUTPUT_VALUE, c.GEN_AI_TOOL_CALL_RESULT),
    call_id=(c.OI_TOOL_CALL_ID, c.GEN_AI_TOOL_CALL_ID),
    agent=(c.OI_AGENT_NAME, c.GEN_AI_AGENT_NAME),
    schema=(c.OI_TOOL_PARAMETERS,),
    arguments_are_json=False,
    bound_calls=True,
)
VERCEL_AI = _Convention(
    c.VERCEL_AI,
    tool_name=(c.AI_TOOL_CALL_NAME,),
    arguments=(c.AI_TOOL_CALL_ARGS,),
    result=(c.AI_TOOL_CALL_RESULT,),
    call_id=(c.AI_TOOL_CALL_ID,),
    agent=(c.AI_FUNCTION_ID,),
)
OPENLLMETRY = _Convention(
    c.OPENLLMETRY,
    tool_name=(c.GEN_AI_TOOL_NAME, c.TRACELOOP_ENTITY_NAME),
    arguments=(c.GEN_AI_TOOL_CALL_ARGUMENTS, c.TRACELOOP_ENTITY_INPUT),
    result=(c.GEN_AI_TOOL_CALL_RESULT, c.TRACELOOP_ENTITY_OUTPUT),
    call_id=(c.GEN_AI_TOOL_CALL_ID,),
    agent=(c.GEN_AI_AGENT_NAME,),
)


def custom_convention(mapping: AttributeMapping) -> _Convention:
    """A convention for in-house attribute names (catalog `attribute_mapping`)."""
    keys = lambda key: (key,) if key else ()  # noqa: E731
    return _Convention(
        c.CUSTOM,
        tool_name=(mapping.tool_name,),
        arguments=keys(mapping.arguments),
        result=keys(mapping.result),
        call_id=keys(mapping.call_id),
        agent=keys(mapping.agent_name),
        arguments_are_json=False,
    )


class ToolCallRecord:
    """One tool call read from a span: a deepeval `ToolCall` plus timing, status and ids.

    What scoring needs (name, timing, error, ids, agent) is read when the span ends; the
    rest (arguments, output, call id, type, schema) only when first asked for, from the
    span's attributes, which the SDK has frozen by then.

    `arguments` is None when the span carries no arguments at all, or carries them in a string
    too large to read (`arguments_captured` is False): unknown, neither valid nor invalid, never
    a repeat of another call. A captured empty `{}` stays `{}`.
    """

    __slots__ = ("name", "duration_s", "start_ns", "end_ns", "error", "error_message", "trace_id", "span_id",
                 "parent_span_id", "agent", "convention", "problems", "_attrs", "_events", "_conv", "_arguments", "_schema",
                 "_tool_call")

    def __init__(self, name: str, attrs: Mapping[str, Any], conv: _Convention, duration_s: float | None = None,
                 start_ns: int | None = None, end_ns: int | None = None, error: str | None = None,
                 error_message: str | None = None, trace_id: int = 0, span_id: int = 0,
                 parent_span_id: int | None = None, agent: str | None = None, problems: list[str] | None = None,
                 events: Any = ()) -> None:
        self.name = name
        self.duration_s = duration_s
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.error = error
        self.error_message = error_message
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_span_id = parent_span_id
        self.agent = agent
        self.convention = conv.name
        self.problems = problems if problems is not None else []
        self._attrs = attrs
        self._events = events  # the span's events (SDK `Event`s), read only for conventions with `argument_events`
        self._conv = conv
        self._arguments: Any = _UNREAD
        self._schema: Any = _UNREAD
        self._tool_call: ToolCall | None = None

    @property
    def arguments(self) -> dict[str, Any] | None:
        """The call's arguments as a dict, parsed on first use; None when the span carries none
        (not captured). Problems are noted, never raised."""
        if self._arguments is _UNREAD:
            raw = self._raw_arguments()
            arguments = None if raw is None else _parse_arguments(raw, self.convention, self.problems)
            if arguments is not None and self._conv.bound_calls:
                arguments = _unbound(arguments, self.parameters_schema)
            self._arguments = arguments
        return self._arguments

    @property
    def arguments_captured(self) -> bool:
        """Whether the span carries the call's arguments, readable (frameworks leave them out unless content
        capture is on; a string over `MAX_ARGUMENT_CHARS` is not read)."""
        if self._arguments is not _UNREAD:
            return self._arguments is not None
        raw = self._raw_arguments()
        return raw is not None and not (isinstance(raw, str) and len(raw) > MAX_ARGUMENT_CHARS)

    def _raw_arguments(self) -> Any:
        """The arguments as the span carries them: the first attribute of the convention that is set, else
        the first argument event's attribute; None when there are none, or when redaction left only its
        mask (strands-agents' opt-in redaction writes `[REDACTED]` there: the arguments are unknown)."""
        attrs = self._attrs
        for key in self._conv.arguments:
            value = attrs.get(key)
            if value is not None:
                if key == ADK_TOOL_CALL_ARGS and value == _ADK_NO_CONTENT and attrs.get(ADK_TOOL_RESPONSE) == _ADK_NO_CONTENT:
                    return None  # ADK's placeholder when content capture is off, not an empty call
                return None if type(value) is str and value == c.REDACTED else value
        for name, key in self._conv.argument_events:
            for event in self._events or ():
                if event.name == name:
                    value = (event.attributes or {}).get(key)
                    if value is not None:
                        return None if type(value) is str and value == c.REDACTED else value
        return None

    input_parameters = arguments  # the deepeval ToolCall spelling, so records score like ToolCalls

    @property
    def output(self) -> Any:
        get = self._attrs.get  # `_first`, inline: the context cost reads it for every call that shares a model call
        for key in self._conv.result:
            value = get(key)
            if value is not None:
                return value
        return None

    @property
    def call_id(self) -> str | None:
        value = _first(self._attrs, self._conv.call_id)
        return _label(value) if value is not None else None

    @property
    def tool_type(self) -> str | None:
        value = _first(self._attrs, self._conv.tool_type)
        return _label(value) if value is not None else None

    type = tool_type

    @property
    def parameters_schema(self) -> dict[str, Any] | None:
        """The JSON Schema the span itself declares for the arguments (OpenInference `tool.parameters`,
        strands-agents' `gen_ai.tool.json_schema`).

        None when the value is no JSON Schema of arguments: smolagents writes its own inputs
        dict there (`{"query": {"type": "string", "description": ...}}`), which would validate anything.
        """
        if self._schema is _UNREAD:
            raw = _first(self._attrs, self._conv.schema)
            if isinstance(raw, str):
                try:
                    raw = _loads(raw) if len(raw) <= MAX_ARGUMENT_CHARS else None
                except (ValueError, RecursionError):
                    raw = None
            self._schema = raw if isinstance(raw, dict) and _is_arguments_schema(raw) else None
        return self._schema

    @property
    def tool_call(self) -> ToolCall:
        """The deepeval `ToolCall` for this record, built on first use (deepeval imports slowly)."""
        if self._tool_call is None:
            from deepeval.test_case import ToolCall

            self._tool_call = ToolCall(name=self.name, input_parameters=self.arguments, output=self.output)
        return self._tool_call

    @property
    def ok(self) -> bool:
        return self.error is None

    def __repr__(self) -> str:
        return (
            f"ToolCallRecord(name={self.name!r}, agent={self.agent!r}, duration_s={self.duration_s!r}, "
            f"error={self.error!r}, convention={self.convention!r}, problems={self.problems!r})"
        )


_UNREAD = object()


def attribute_dict(span: ReadableSpan) -> Mapping[str, Any]:
    """The span's attributes as a plain mapping, read without copying.

    `ReadableSpan.attributes` wraps the attributes in a new `MappingProxyType` over
    `BoundedAttributes`, whose Python-level `__getitem__` costs ~0.5 µs per look-up.
    The SDK keeps a plain dict inside; reading it directly keeps non-tool spans
    under a microsecond (pinned by a test, in case the SDK changes its internals).
    """
    attrs = getattr(span, "_attributes", None)
    if type(attrs) is dict:  # spans read from recorded or received OTLP (score, serve) and our copies
        return attrs
    inner = getattr(attrs, "_dict", None)  # an SDK span's BoundedAttributes (a raised AttributeError costs more)
    if type(inner) is dict:
        return inner
    if isinstance(attrs, Mapping):
        return attrs
    return span.attributes or {}


class SpanFacts(NamedTuple):
    """Where a finished span sits and when it ran: read once, then passed along its whole way through the core."""

    trace_id: int
    span_id: int
    parent_id: int | None
    is_root: bool  # no parent, or a remote one: the trace's local root
    start_ns: Any  # as the span holds them (an int, unless the span is broken)
    end_ns: Any


_new_tuple = tuple.__new__


def span_facts(span: ReadableSpan) -> SpanFacts:
    """The span's ids and times. The SDK keeps them in fields (`_context`, `_parent`: a `SpanContext`, a
    tuple of trace id, span id, is_remote, ...), and its properties would cost a Python call per read,
    a dozen reads per span; spans of another implementation are read through the properties."""
    try:
        context, parent, start, end = span._context, span._parent, span._start_time, span._end_time  # type: ignore[attr-defined]
    except AttributeError:
        context, parent = getattr(span, "context", None), getattr(span, "parent", None)
        start, end = getattr(span, "start_time", None), getattr(span, "end_time", None)
    if type(context) is SpanContext:
        trace_id, span_id = context[0], context[1]
    else:
        trace_id, span_id = getattr(context, "trace_id", 0) or 0, getattr(context, "span_id", 0) or 0
    if parent is None:  # built by tuple.__new__: a NamedTuple's own __new__ is a Python call, a third of the cost
        return _new_tuple(SpanFacts, (trace_id, span_id, None, True, start, end))
    if type(parent) is SpanContext:
        return _new_tuple(SpanFacts, (trace_id, span_id, parent[1], parent[2], start, end))
    return SpanFacts(trace_id, span_id, getattr(parent, "span_id", None), bool(getattr(parent, "is_remote", False)), start, end)


def convention_of(attrs: Mapping[str, Any], custom: _Convention | None = None,
                  ignored: Collection[str] = DEFAULT_IGNORE_TOOLS) -> _Convention | None:
    """The convention under which these attributes describe a tool call, or None.

    Also None for a call of a framework-internal tool named in `ignored` (the catalog's
    `ignore_tools`; smolagents' `final_answer` by default): it is no tool call of the agent.
    """
    if attrs.get(c.GEN_AI_OPERATION_NAME) == c.OP_EXECUTE_TOOL:
        convention = OPENLLMETRY if c.TRACELOOP_SPAN_KIND in attrs else GENAI  # OpenLLMetry sets both
    elif attrs.get(c.OPENINFERENCE_SPAN_KIND) == c.OI_KIND_TOOL:
        convention = OPENINFERENCE
    elif attrs.get(c.TRACELOOP_SPAN_KIND) == c.TL_KIND_TOOL:
        convention = OPENLLMETRY
    elif attrs.get(c.AI_OPERATION_ID) == c.AI_TOOL_CALL:
        convention = VERCEL_AI
    elif custom is not None and custom.tool_name[0] in attrs:
        convention = custom
    else:
        return None
    if convention is GENAI and attrs.get(c.GEN_AI_TOOL_NAME) == ADK_MERGED_TOOLS:
        return None  # google-adk's span grouping the responses of parallel calls: each call has its own span
    if ignored:
        name = attrs.get(convention.tool_name[0])
        if type(name) is str and name:  # the common case, in one look-up
            return None if name in ignored else convention
        if _name_in(attrs, convention.tool_name, ignored):
            return None
    return convention


def _name_in(attrs: Mapping[str, Any], keys: tuple[str, ...], names: Collection[str]) -> bool:
    """Whether the tool name (the first readable one of `keys`) is one of `names`."""
    for key in keys:
        name = _as_text(attrs.get(key))
        if name:
            return name in names
    return False


class LLMCall(NamedTuple):
    """One model call in a run: what it cost in tokens, and its messages (as recorded) for test cases."""

    model: str | None
    input_tokens: int  # the whole prompt, its cached parts included (core.token_usage)
    output_tokens: int  # the whole completion, its reasoning included
    span_id: int = 0
    input_messages: Any = None  # GenAI `gen_ai.input.messages`, when recorded
    output_messages: Any = None
    start_ns: int | None = None  # places the call in the agent run whose time range holds it
    cached_input_tokens: int = 0  # of `input_tokens`, those served from the provider's cache (priced apart)
    provider: str | None = None  # as the span names it (core.prices.provider_of): narrows the price table's lookup
    reported_cost_usd: float | None = None  # the cost the span reports itself (core.prices.reported_cost)
    cache_creation_input_tokens: int = 0  # of `input_tokens`, those written to the provider's cache
    reasoning_tokens: int = 0  # of `output_tokens`, those spent reasoning


def llm_call_of(attrs: Mapping[str, Any], span_id: int = 0, start_ns: int | None = None, priced: bool = False) -> LLMCall | None:
    """The model and token usage if these attributes mark a model call (GenAI, OpenInference, OpenLLMetry, Vercel AI
    SDK, google-adk's legacy `call_llm`).

    The token counts are read under every name in `core.token_usage.TOKEN_NAMES`, whichever convention marks the
    span: an OpenLLMetry 0.47 `openai.chat` span (`llm.request.type`) writes the older `gen_ai.usage.prompt_tokens`.
    Cached input tokens are part of the input tokens, and priced apart. `priced` also reads the provider and the cost
    the span reports (`provider_of`, `reported_cost`): the whole call, built once.
    """
    # Hot: once per span that is no tool call, so the common GenAI chat span is read without helper calls
    get = attrs.get
    operation = get(c.GEN_AI_OPERATION_NAME)
    if type(operation) is not str:
        operation = _as_text(operation)
    if operation is not None and operation in c.LLM_OPERATIONS:
        model = get(c.GEN_AI_RESPONSE_MODEL) or get(c.GEN_AI_REQUEST_MODEL)
        messages = get(c.GEN_AI_INPUT_MESSAGES), get(c.GEN_AI_OUTPUT_MESSAGES)
    elif _MODEL_CALL_MARKERS.isdisjoint(attrs):  # most spans carry none of them: one pass over their keys, in C
        return None
    elif get(c.TRACELOOP_SPAN_KIND) == c.TL_KIND_LLM:
        model = get(c.GEN_AI_RESPONSE_MODEL) or get(c.GEN_AI_REQUEST_MODEL)
        messages = get(c.GEN_AI_INPUT_MESSAGES), get(c.GEN_AI_OUTPUT_MESSAGES)
    elif get(c.OPENINFERENCE_SPAN_KIND) == c.OI_KIND_LLM:
        if not any(key in attrs for key in c.OI_LLM_CALL_EVIDENCE):
            return None  # an LLM object's helper method (llama-index `_prepare_chat_with_tools`), no model call
        model = get(c.OI_LLM_MODEL_NAME)
        messages = get(c.OI_INPUT_VALUE), get(c.OI_FIRST_OUTPUT_MESSAGE)
    elif get(c.TL_LLM_REQUEST_TYPE) in c.TL_LLM_REQUEST_TYPES or (operation is None and get(c.GEN_AI_SYSTEM) == c.ADK_SYSTEM):
        model = get(c.GEN_AI_RESPONSE_MODEL) or get(c.GEN_AI_REQUEST_MODEL)  # OpenLLMetry's client spans, ADK's call_llm
        messages = get(c.GEN_AI_INPUT_MESSAGES), get(c.GEN_AI_OUTPUT_MESSAGES)
    elif (operation_id := get(c.AI_OPERATION_ID)) is not None and _is_ai_model_call(operation_id):  # Vercel `doGenerate`
        model = get(c.GEN_AI_RESPONSE_MODEL) or get(c.AI_RESPONSE_MODEL) or get(c.GEN_AI_REQUEST_MODEL) or get(c.AI_MODEL_ID)
        messages = None, None
    else:
        return None
    if type(model) is not str:
        model = _as_text(model)
    tokens_in, cached, created, tokens_out, reasoning = token_counts(attrs)
    provider, cost = (provider_of(attrs), reported_cost(attrs)) if priced else (None, None)
    # LLMCall(...) without NamedTuple's Python-level __new__ (all twelve fields given)
    return _new_tuple(LLMCall, (model or None, tokens_in, tokens_out, span_id, messages[0], messages[1], start_ns, cached,
                                provider, cost, created, reasoning))


# The keys other than `gen_ai.operation.name` that can mark a span as a model call (the branches of `llm_call_of`).
_MODEL_CALL_MARKERS = frozenset({c.TRACELOOP_SPAN_KIND, c.TL_LLM_REQUEST_TYPE, c.GEN_AI_SYSTEM, c.OPENINFERENCE_SPAN_KIND,
                                 c.AI_OPERATION_ID})


def _is_ai_model_call(operation: Any) -> bool:
    """Whether an `ai.operationId` is one provider call (`ai.generateText.doGenerate`, `ai.streamText.doStream`)."""
    return type(operation) is str and operation.startswith("ai.") and operation.endswith(c.AI_MODEL_CALL_SUFFIXES)


def agent_name_of(attrs: Mapping[str, Any], span_name: str | None = None) -> str | None:
    """The agent's name if these attributes mark an agent span (GenAI `invoke_agent`, or `invoke_workflow` named by
    `gen_ai.workflow.name`; OpenInference; OpenLLMetry).

    The agent-name attribute wins; else a name read from the OpenLLMetry entity name or the span
    name (`invoke_agent support_agent`, smolagents' `support_agent.run`), only if it looks like a
    name (`name_from_span_name`): free text never becomes a label value. None when these are no
    agent span's attributes, or when no usable name is there (yet: attributes set after the start
    name the agent when it ends; an agent span that never names itself is no run boundary).
    """
    operation = attrs.get(c.GEN_AI_OPERATION_NAME)
    if operation == c.OP_INVOKE_AGENT:
        name = _as_text(attrs.get(c.GEN_AI_AGENT_NAME))
    elif operation == c.OP_INVOKE_WORKFLOW:
        name = _as_text(attrs.get(c.GEN_AI_WORKFLOW_NAME)) or _as_text(attrs.get(c.GEN_AI_AGENT_NAME))
    elif operation == c.OP_EXECUTE_TOOL:  # a tool span is no agent span, whatever kind it also claims
        return None
    elif attrs.get(c.OPENINFERENCE_SPAN_KIND) == c.OI_KIND_AGENT:
        name = (_as_text(attrs.get(c.OI_AGENT_NAME)) or _as_text(attrs.get(c.GEN_AI_AGENT_NAME))
                or _as_text(attrs.get(c.OI_GRAPH_NODE_ID)))
    elif attrs.get(c.TRACELOOP_SPAN_KIND) in (c.TL_KIND_AGENT, c.TL_KIND_WORKFLOW):
        name = _as_text(attrs.get(c.GEN_AI_AGENT_NAME)) or name_from_span_name(_as_text(attrs.get(c.TRACELOOP_ENTITY_NAME)))
    elif attrs.get(c.AI_OPERATION_ID) in c.AI_RUN_OPERATIONS:  # Vercel AI SDK: named only by the app's functionId
        name = _as_text(attrs.get(c.AI_FUNCTION_ID))
        return name[:MAX_NAME_CHARS] if name else None
    else:
        return None
    if not name:
        name = name_from_span_name(span_name)
        if name is not None and name == _as_text(attrs.get(c.GEN_AI_REQUEST_MODEL)):
            return None  # `invoke_agent {modelId}` (Vercel AI SDK 7 without a functionId): a model is no agent
    return name[:MAX_NAME_CHARS] if name else None


def agent_at_start(attrs: Mapping[str, Any], span_name: Any, typed: bool) -> str | None:
    """The agent (or workflow) a span announces as it starts, or None: the one rule for the processor's
    `on_start` and the replays' agent-start hints (`score`, `serve`).

    `typed` says whether the attributes carry a kind marker (`Pipeline.is_typed`): then they decide, as
    at the span's end (`agent_name_of`). Without one, a span named `invoke_agent <name>` or
    `invoke_workflow <name>` is a GenAI agent span whose attributes come later (strands-agents,
    agent-framework and google-adk set them after the start): its name announces the run now, so
    its tool spans are scored as they end instead of waiting for the agent span's end.

        >>> agent_at_start({}, "invoke_agent support_agent", False), agent_at_start({}, "chat gpt-4o", False)
        ('support_agent', None)
    """
    if typed:
        return agent_name_of(attrs, span_name)
    if type(span_name) is str and span_name.startswith(c.RUN_ROOT_SPAN_PREFIXES):
        return name_from_span_name(span_name)
    return None


_CURRENT_AGENT_NAME = re.compile(r"current_agent_name='([^'\\]{1,%d})'" % MAX_DERIVED_NAME_CHARS)


def workflow_agent_of(attrs: Mapping[str, Any], span_name: Any) -> str | None:
    """The agent a llama-index agent workflow step is running, or None: its `<Workflow>.setup_agent` CHAIN span holds
    `current_agent_name='support_agent'` in its input event (`FunctionAgent(name="support_agent")`); the workflow
    class in the root's name (`FunctionAgent.run`) is only the fallback label.

        >>> workflow_agent_of({"openinference.span.kind": "CHAIN", "input.value": "AgentInput(input=[], "
        ...                    "current_agent_name='support_agent')"}, "BaseWorkflowAgent.setup_agent")
        'support_agent'
    """
    if type(span_name) is not str or not span_name.endswith(c.LLAMA_INDEX_SETUP_AGENT_SUFFIX):
        return None
    value = attrs.get(c.OI_INPUT_VALUE)
    if attrs.get(c.OPENINFERENCE_SPAN_KIND) != c.OI_KIND_CHAIN or type(value) is not str:
        return None
    found = _CURRENT_AGENT_NAME.search(value)
    name = found.group(1) if found else None
    return name if name is not None and _NAME_LIKE.match(name) else None


def name_from_span_name(span_name: Any, *, suffixed: bool = False) -> str | None:
    """An agent's (or workflow's) name read from a span name, or None when it reads as free text.

        >>> name_from_span_name("invoke_agent support_agent"), name_from_span_name("support_agent.run")
        ('support_agent', 'support_agent')
        >>> name_from_span_name("Answer the customer's question about returns") is None
        True

    The GenAI `invoke_agent ` prefix and the known suffixes (`AGENT_SPAN_NAME_SUFFIXES`: smolagents'
    `<agent>.run`, llama-index's `<Workflow>.run`) are taken off; what is left must be one word of
    letters, digits, `_ . : -` of at most `MAX_DERIVED_NAME_CHARS` characters, and no method name
    (`Calculator._execute_core`: a dot before an underscore). `suffixed` accepts
    only a name with a known suffix (for a root span that is not marked as an agent).
    """
    name = _as_text(span_name)
    if not name:
        return None
    for prefix in c.RUN_ROOT_SPAN_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):].strip()
            break
    else:
        name = name.removeprefix(c.OP_INVOKE_AGENT).strip()
    for suffix in c.AGENT_SPAN_NAME_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    else:
        if suffixed:
            return None
    if len(name) > MAX_DERIVED_NAME_CHARS or not _NAME_LIKE.match(name) or "._" in name:
        return None  # free text, or a method (CrewAI's `Calculator._execute_core`): no agent's name
    return name


def tool_call_from_span(span: ReadableSpan, mapping: AttributeMapping | _Convention | None = None) -> ToolCallRecord | None:
    """Read a finished span into a `ToolCallRecord`, or None if it is not a tool call.

    `mapping` adds an in-house convention (an `AttributeMapping` from the catalog).
    Never raises on odd values: what could not be read is listed in `record.problems`.
    """
    custom = custom_convention(mapping) if isinstance(mapping, AttributeMapping) else mapping
    attrs = attribute_dict(span)
    convention = convention_of(attrs, custom)
    if convention is None:
        return None
    return read_tool_call(span, attrs, convention)


def _first(attrs: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = attrs.get(key)
        if value is not None:
            return value
    return None


_ERROR, _OK = StatusCode.ERROR, StatusCode.OK


def read_tool_call(span: ReadableSpan, attrs: Mapping[str, Any], convention: _Convention,
                   facts: SpanFacts | None = None) -> ToolCallRecord:
    """Build the record for a span already known to be a tool call under `convention` (`facts`: its
    `span_facts`, when the caller has them)."""
    if facts is None:
        facts = span_facts(span)
    problems: list[str] = []
    raw_name = attrs.get(convention.tool_name[0])
    name = raw_name if type(raw_name) is str else _as_text(raw_name)
    if name is not None and len(name) > MAX_NAME_CHARS:  # readable, just too long to keep whole
        name = name[:MAX_NAME_CHARS]
    if not name:
        name = _as_text(_first(attrs, convention.tool_name[1:])) if len(convention.tool_name) > 1 else None
        if not name:
            span_name = getattr(span, "name", None)
            fallback = span_name.removeprefix(c.OP_EXECUTE_TOOL).strip() if isinstance(span_name, str) else ""
            problems.append(f"tool name missing or not a string ({convention.tool_name[0]}={_short(raw_name)})")
            name = fallback or "unknown"
    elif "/" in name or "\\" in name:
        name = function_name(name)

    start, end = facts.start_ns, facts.end_ns
    if type(start) is int and type(end) is int and 0 <= end - start < MAX_DURATION_NS:
        duration = (end - start) / 1e9
    else:
        duration = None
        problems.append(f"no valid start/end time (start={start!r}, end={end!r})")

    status = getattr(span, "_status", None) or getattr(span, "status", None)
    events = span_events(span)
    error, error_message = call_error(span, attrs, status, events)
    agent = _as_text(_first(attrs, convention.agent)) if convention.agent else None
    if agent is not None and len(agent) > MAX_NAME_CHARS:
        agent = agent[:MAX_NAME_CHARS]
    return ToolCallRecord(
        name, attrs, convention, duration, start if type(start) is int else None, end if type(end) is int else None,
        error, error_message, facts.trace_id, facts.span_id, facts.parent_id, agent or None, problems, events,
    )


def call_error(span: Any, attrs: Mapping[str, Any], status: Any = None, events: Any = None) -> tuple[str | None, str | None]:
    """(error type, message) when the tool span says the call failed, else (None, None): the one rule for a call's error.

    A call failed when its span has `error.type`, or status ERROR, or `gen_ai.tool.status` "error" (strands-agents:
    a tool that raised is an error *result*, the span status stays OK), or, with its status left UNSET, an
    `exception` event. An `exception` event under status OK was handled (a retry that worked): no failure. The
    type is `error.type`, else the `exception` event's `exception.type`, else `_OTHER`. (An ERROR child span of a
    tool span whose status is UNSET fails the call too: the pipeline sees the child, `child_error`.) `events`: the
    span's `span_events`, when the caller has them.
    """
    if status is None:
        status = getattr(span, "_status", None) or getattr(span, "status", None)
    code = getattr(status, "status_code", None)
    error_type = attrs.get(c.ERROR_TYPE)
    if error_type is not None and error_type != "":
        return _label(error_type), getattr(status, "description", None)
    tool_status = _as_text(attrs.get(c.GEN_AI_TOOL_STATUS))
    failed = code is _ERROR or (tool_status is not None and tool_status.lower() in c.TOOL_STATUS_FAILED)
    exception_type = _exception_type(span_events(span) if events is None else events) if failed or code is not _OK else None
    if failed or exception_type is not None:
        return exception_type or UNKNOWN_ERROR_TYPE, getattr(status, "description", None) or None
    return None, None


def function_name(name: str) -> str:
    """The function part of a tool name that carries a file path: CrewAI's MCP adapter names a tool
    `<command>_<args>_<tool>`, so `/venv/bin/python3_/srv/mcp/calculator.py_calculate` is `calculate`.

        >>> function_name("/venv/bin/python3_/srv/mcp/calculator.py_calculate"), function_name("web_search")
        ('calculate', 'web_search')

    The last path segment is kept, less a leading script file name (`calculator.py_`). A label never carries a path.
    """
    last = _PATH_SEPARATOR.split(name)[-1]
    script = _SCRIPT_PREFIX.match(last)
    return (script.group(1) if script else last) or name


_PATH_SEPARATOR = re.compile(r"[/\\]")
_SCRIPT_PREFIX = re.compile(r"[^_]*?\.[A-Za-z0-9]+_(.+)\Z")  # `calculator.py_calculate`: a script, then the function


def _parse_arguments(raw: Any, convention: str, problems: list[str]) -> dict[str, Any] | None:
    """The arguments as a dict; None (unknown, a problem noted) for a string too large to read."""
    if raw is None:
        return {}
    if type(raw) is not str and isinstance(raw, Mapping):  # the common str first: an ABC check costs 0.3 us
        return dict(raw)
    if not isinstance(raw, str):
        problems.append(f"arguments are a {type(raw).__name__}, not a JSON object string")
        return {"input": list(raw) if isinstance(raw, (tuple, list)) else raw}
    if len(raw) > MAX_ARGUMENT_CHARS:
        problems.append(f"arguments not read: {len(raw)} characters is over the {MAX_ARGUMENT_CHARS} limit")
        return None
    try:
        value = _loads(raw)
    except (ValueError, RecursionError):
        if convention not in (c.OPENINFERENCE, c.CUSTOM):
            problems.append("arguments are not valid JSON")
        return {"input": raw}
    return value if isinstance(value, dict) else {"input": value}


_decoder = json.JSONDecoder()
_scan_json = _decoder.scan_once  # the C scanner json.loads runs, without its Python-level wrapping


def _loads(text: str) -> Any:
    """`json.loads(text)`, a third of its cost for the common case: the C scanner on text that is one JSON
    value and nothing else; anything else (surrounding whitespace, errors) takes json.loads, which decides."""
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def _unbound(arguments: dict[str, Any], schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The arguments inside an OpenInference bound call (smolagents, llama-index write
    `{"args": [], "kwargs": {...}, "sanitize_inputs_outputs": true}` as a tool's input).

    Keyword arguments are the arguments; a lone positional one reads as plain input. Left as it
    is when it is no such envelope, or when the tool itself declares an argument named `kwargs`.
    """
    kwargs = arguments.get(c.OI_BOUND_KWARGS)
    if c.CREWAI_CALLING in arguments and c.CREWAI_USE_KEYS.issuperset(arguments):
        return _crewai_arguments(arguments)
    if type(kwargs) is not dict or not c.OI_BOUND_CALL_KEYS.issuperset(arguments):
        return arguments
    properties = schema.get("properties") if schema is not None else None
    if isinstance(properties, Mapping) and c.OI_BOUND_KWARGS in properties:
        return arguments
    args = arguments.get(c.OI_BOUND_ARGS) or []
    if not isinstance(args, list):
        return arguments
    if not args:
        return kwargs
    if len(args) == 1 and not kwargs:
        return {"input": args[0]}
    return {**kwargs, c.OI_BOUND_ARGS: args}


_CALLING_ARGUMENTS = re.compile(r"\barguments=(\{.*\})\s*\Z", re.DOTALL)  # the repr of CrewAI's ToolCalling
_ACTION_INPUT = re.compile(r"Action Input:\s*")  # the ReAct text's arguments follow, as JSON


def _crewai_arguments(bound: dict[str, Any]) -> dict[str, Any]:
    """The arguments of CrewAI's bound `_use(tool_string, tool, calling)` (OpenInference's `input.value` of its
    tool spans): `calling["arguments"]` when `calling` is a dict, else read from its repr `tool_name='x'
    arguments={...}` (a Python literal, never evaluated as code), else the `Action Input: {json}` of the ReAct text."""
    calling = bound.get(c.CREWAI_CALLING)
    if isinstance(calling, dict) and isinstance(calling.get("arguments"), dict):
        return calling["arguments"]
    if isinstance(calling, str) and len(calling) <= MAX_ARGUMENT_CHARS:
        found = _CALLING_ARGUMENTS.search(calling)
        if found is not None:
            try:
                value = ast.literal_eval(found.group(1))
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                value = None
            if isinstance(value, dict):
                return value
    text = bound.get("tool_string")
    if isinstance(text, str) and len(text) <= MAX_ARGUMENT_CHARS:
        found = _ACTION_INPUT.search(text)
        if found is not None:
            try:
                value = _decoder.raw_decode(text, found.end())[0]
            except (ValueError, RecursionError):
                value = None
            if isinstance(value, dict):
                return value
    return bound


# Keywords that only a JSON Schema has at its top level. A dict without any is no schema of
# arguments (smolagents' inputs dict {"query": {"type": "string", ...}} would validate anything).
_SCHEMA_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties", "$schema", "$ref", "$defs",
                              "definitions", "anyOf", "oneOf", "allOf", "not", "if", "enum", "const"})


def _is_arguments_schema(value: Mapping[str, Any]) -> bool:
    if not value:
        return True  # {}: the schema that accepts anything
    if not _SCHEMA_KEYWORDS.intersection(value):
        return False
    if "type" not in value and all(isinstance(v, Mapping) and "type" in v for v in value.values()):
        return False  # {"properties": {"type": "string", ...}}: an inputs dict with an argument named "properties"
    kind = value.get("type")
    # {"type": {"type": "string", ...}} is an inputs dict with an argument named "type"
    return kind is None or isinstance(kind, (str, list))


def _as_text(value: Any) -> str | None:
    """`value` as a plain `str` if it is text, including a `str` subclass such as an enum
    (Microsoft agent-framework's attribute values), else None. `str()` of an enum would give
    its qualified name (`Operation.CHAT`), not its value."""
    if type(value) is str:
        return value
    return str.__str__(value) if isinstance(value, str) else None


def _label(value: Any) -> str:
    """Any attribute value as text: a `str` (subclass) as its text, anything else by `str()`."""
    text = _as_text(value)
    return text if text is not None else str(value)


def span_events(span: Any) -> Any:
    """The span's events, to iterate, without copying them: `ReadableSpan.events` builds a tuple through the SDK's
    `BoundedList`, whose Python-level iterator runs even when there are none; its deque is read directly."""
    events = getattr(span, "_events", None)
    if type(events) is BoundedList:
        return events._dq
    if events is None:
        return getattr(span, "events", None) or ()
    return events


def _exception_type(events: Any) -> str | None:
    """The `exception.type` of the first `exception` event ("" when it names none), else None (no such event)."""
    for event in events or ():
        if event.name == c.EXCEPTION_EVENT:
            value = (event.attributes or {}).get(c.EXCEPTION_TYPE)
            return _label(value) if value else ""
    return None


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
