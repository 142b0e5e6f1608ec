"""Which spans cannot matter to the evaluation: the one rule every fast path follows (this module is its specification).

Most spans of a real agent trace are HTTP client calls, database queries, framework internals and
auto-instrumented servers. The core does nothing with such a span but count it (`spans_ignored`) and pass it on;
the paths that carry it (the processor's `on_end`, `serve`'s reader, `score`'s reader) send it by a fast path
instead of building it and running the core on it. The rule errs towards "matters": a span it cannot decide
about takes the full path, where it is merely slower; a span the full path would treat differently is never
noise. `tests/test_noise.py` holds the outputs of both paths equal on generated traces.

A span MAY MATTER, and takes the full path, when any of these holds (`may_matter`):

1. it is *typed*: one of the kind keys (`gen_ai.operation.name`, `openinference.span.kind`, `traceloop.span.kind`,
   `ai.operationId`, OpenLLMetry's `llm.request.type`) or the catalog's custom tool-name key is among its attributes
   (`Pipeline.is_typed`), or it carries `gen_ai.system` (google-adk's legacy `call_llm` model calls have no kind key). That
   covers every tool call (`convention_of`), model call (`llm_call_of`), agent and workflow span
   (`agent_name_of`), llama-index's `setup_agent` CHAIN (`workflow_agent_of`), and Vercel AI's runs; none of
   them is recognised without a kind key;
2. it is its trace's *local root* (no parent, or a remote one): it closes its trace's runs (`span_ended`), names
   a trace run (`FunctionAgent.run`), is the root whose attributes and resource route the run and which is
   enriched, and is remembered for spans that end after it (`recent_roots`, late calls);
3. its status is *ERROR*: it fails a tool span above it left UNSET (`child_failed`, `call_error`);
4. its name starts `invoke_agent ` or `invoke_workflow ` (`RUN_ROOT_SPAN_PREFIXES`): it announces a run as it
   starts (`agent_at_start`), and its end closes that run;
5. it *holds a model call*: its span id is among its trace's `llm_parents` (`RunTracker.llm_inside`: a model
   call whose spans nest through others, google-adk `call_llm` > `generate_content` > a client's span, is
   counted once). This one depends on the spans that ended before it, so each path decides it its own way:

   - where the spans come as one ordered stream (`score` and `serve` replay each file or request), the noise
     span is read only as far as its ids and times (`otlp.messages.Noise`, with its message in `serve`) and stays
     in the replay: `noise_ended` does what the core does with it (counts it ignored, moves a model call's mark
     to its parent), so the replay's order, its clock and its clock-skew corrections are the full path's;
   - the processor decides on the app's thread, before the core has seen the span's children: there a span
     matters when it is the parent of a span that mattered and ended before it, or announced an agent run as it
     started (`held`: every mark `llm_inside` could find is one of these). Its traces are those it already hands
     to its thread; a span of a trace with nothing handed off yet passes on at once, as it always did, and so
     do the spans of traces it forgets past 4 x `max_open_traces` (only those the core no longer tracks).

Nothing else a span that is neither typed, a root, failed nor named as a run feeds: routing reads the attributes
of tool spans and run roots and the resource of those; agent names come from typed spans and root names;
deferred calls and late spans are tool and model spans; a trace's last activity (its TTL) moves only with the spans
the core records in it.

`OTEL_AGENT_EVAL_NOISE_FAST_PATH=0` (read at import; `FAST_PATH` at run time) sends every span by the full path, as
before the fast path existed: the bench measures the old path so, and it is a switch to rule the fast path out.

Redaction (`core/redact.py`) stays on every span that leaves: the processor queues noise to its thread, which only
redacts and forwards it (no evaluation); `serve` with redaction on builds every span as before (its noise is
redacted by the one redactor, so no fast path there); `score` forwards nothing.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from ..otlp.messages import Noise
from . import conventions as c

__all__ = ["FAST_PATH", "RUN_NAME_PREFIXES", "RUN_NAME_STEM", "Noise", "json_noise", "may_matter", "noise_ended", "pipeline_keys",
           "sdk_span_may_matter", "typed_keys"]

FAST_PATH = os.environ.get("OTEL_AGENT_EVAL_NOISE_FAST_PATH", "1").strip() != "0"  # False: every span the full path
RUN_NAME_PREFIXES = c.RUN_ROOT_SPAN_PREFIXES  # rule 4
# what every run name holds: `RUN_NAME_STEM in name` rules rule 4 out for most names at a sixth of `startswith`'s cost
RUN_NAME_STEM = os.path.commonprefix(RUN_NAME_PREFIXES)
# rule 1: the core's kind keys (`Pipeline.is_typed`), and `gen_ai.system`, which marks google-adk's legacy `call_llm`
# model calls (they carry no kind key: `llm_call_of` knows them by `gen_ai.system=gcp.vertex.agent`)
KIND_KEYS = (*c.KIND_KEYS, c.GEN_AI_SYSTEM)
_ERROR = StatusCode.ERROR
_new_tuple = tuple.__new__


def may_matter(typed: bool, name: Any, is_error: bool, is_root: bool) -> bool:
    """Rules 1-4: whether a span may matter by what it carries itself (rule 5 is the caller's, see the module)."""
    return typed or is_root or is_error or type(name) is not str or name.startswith(RUN_NAME_PREFIXES)


def typed_keys(custom_tool_key: str | None) -> frozenset[str]:
    """The attribute keys that make a span typed (rule 1): the kind keys, and the catalog's custom tool-name key."""
    return frozenset(KIND_KEYS + ((custom_tool_key,) if custom_tool_key else ()))


def pipeline_keys(pipeline: Any) -> list[str] | None:
    """The attribute keys that make a span typed under the pipeline's catalog now (a reload may change its custom
    tool-name key), as `serve`'s native reader takes them; None when redaction is on (then every span is built and
    redacted: no fast path, see the module)."""
    if pipeline.redactor is not None or not FAST_PATH:
        return None
    state = pipeline.state
    cached = _KEYS_OF.get(id(state))
    if cached is None or cached[0] is not state:
        custom = state.custom
        _KEYS_OF.clear()  # one catalog in force at a time
        cached = _KEYS_OF[id(state)] = (state, sorted(typed_keys(custom.tool_name[0] if custom is not None else None)))
    return cached[1]


_KEYS_OF: dict[int, tuple[Any, list[str]]] = {}


def sdk_span_may_matter(span: ReadableSpan, held: Collection[int] | None) -> bool:
    """Rules 2-5 for an untyped finished SDK span in the processor (rule 1 decided already, `Pipeline.is_typed`):
    `held` are ids of spans that rule 5 makes matter (those of its trace among them: others only err towards
    "matters"). Anything unusual (a span of another implementation) matters. Hot: every untyped span, on the app's
    thread."""
    if not FAST_PATH:
        return True
    try:
        parent, name = span._parent, span._name  # type: ignore[attr-defined]
        if parent is None or parent[2] or span._status.status_code is _ERROR:  # a SpanContext: (trace, span, is_remote, ...)
            return True
        if type(name) is not str or (RUN_NAME_STEM in name and name.startswith(RUN_NAME_PREFIXES)):
            return True
        return held is not None and span._context[1] in held  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - not the SDK's ReadableSpan: the full path reads it
        return True


def noise_ended(pipeline: Any, facts: Any) -> None:
    """What `Pipeline.ended` does with a span that cannot matter, and no more: it counts it ignored and, when the span
    holds a model call counted below it, marks its parent instead (rule 5, `RunTracker.llm_inside`)."""
    try:
        pipeline.sink.span_ignored()
        pipeline.runs.llm_inside(facts[0], facts[1], facts[2])
    except Exception as exc:  # noqa: BLE001 - never break the host app
        pipeline.failed("on_end", exc)


# -- OTLP/JSON (`score`): decided on the decoded request, before a span is built -------------------------------------

def json_noise(keys: Collection[str]) -> Callable[[Mapping[str, Any]], Noise | None]:
    """A reader of one OTLP/JSON span object (as the Collector's file exporter writes it) that returns its `Noise`
    when it cannot matter, else None (then it is read whole). `keys`: `typed_keys(...)`.

    Noise only when every field the full reader (`otlp.json_spans.otlp_span`) checks reads cleanly in its common
    spelling, so a span it would skip with a problem is read by it and skipped the same: hex ids of the right
    length, times as decimal strings, plain attribute values (a string, or an int as a decimal string), no events,
    links or trace state, integer flags and status code. Anything else takes the full path.
    """
    keys = frozenset(keys)
    plain_fields = _PLAIN_FIELDS.issuperset
    hex_ids = _HEX_IDS.fullmatch
    remote_bits = 0x300  # OTLP SpanFlags HAS_IS_REMOTE | IS_REMOTE
    error_codes = (2, "STATUS_CODE_ERROR")
    plain_codes = (0, 1, "STATUS_CODE_UNSET", "STATUS_CODE_OK")
    prefixes = RUN_NAME_PREFIXES

    # Hot: once per span of a file. Anything unexpected in the shapes read raises, and takes the full path.
    def noise(item: Mapping[str, Any]) -> Noise | None:
        if not plain_fields(item):
            return None  # events, links, a trace state, other spellings: the full reader reads them
        get = item.get
        try:
            parent_text, name = get("parentSpanId"), get("name")
            if not parent_text or type(name) is not str or name.startswith(prefixes):
                return None  # a local root (rule 2), a run named (rule 4)
            status = get("status")
            if status:
                code = status.get("code", 0)
                if code in error_codes or code not in plain_codes or type(code) is bool:
                    return None  # ERROR (rule 3), or a code the full reader reads its own way
            flags = get("flags") or 0
            if type(flags) is not int or flags & remote_bits == remote_bits:
                return None  # a remote parent: a local root (rule 2)
            kind = get("kind")
            if kind is not None and type(kind) is not int and type(kind) is not str:
                return None  # the full reader looks it up: an unhashable kind is a problem there
            for kv in get("attributes") or ():
                key, value = kv["key"], kv["value"]
                if key in keys or type(key) is not str:
                    return None  # typed (rule 1)
                if type(value.get("stringValue")) is not str:
                    text = value.get("intValue")
                    if not (type(text) is str and len(value) == 1 and len(text) < 19 and text.isascii() and text.isdigit()):
                        return None
            span_text = get("spanId")
            if len(span_text) != 16 or len(parent_text) != 16:
                return None
            ids = get("traceId") + span_text + parent_text  # 32 + 16 + 16 hex digits
            start, end = get("startTimeUnixNano"), get("endTimeUnixNano")
            if (hex_ids(ids) is None or type(start) is not str or type(end) is not str or not start.isascii()
                    or not end.isascii() or not start.isdigit() or not end.isdigit()):
                return None
            start, end, value = int(start), int(end), int(ids, 16)
        except (AttributeError, TypeError, KeyError):
            return None
        trace_id, span_id, parent_id = value >> 128, (value >> 64) & _ID_MASK, value & _ID_MASK
        if not (trace_id and span_id and parent_id and 0 < start < _FIXED64 and 0 < end < _FIXED64):
            return None
        return _new_tuple(Noise, (trace_id, span_id, parent_id, False, start, end, None, None))

    return noise


# the fields an OTLP/JSON span has in the spelling the Collector writes, less events, links and a trace state
_PLAIN_FIELDS = frozenset({"traceId", "spanId", "parentSpanId", "flags", "name", "kind", "startTimeUnixNano", "endTimeUnixNano",
                           "attributes", "droppedAttributesCount", "droppedEventsCount", "droppedLinksCount", "status"})
_HEX_IDS = re.compile(r"[0-9a-fA-F]{64}")  # a trace id, a span id and a parent id, in hex (`int` takes more)
_ID_MASK, _FIXED64 = (1 << 64) - 1, 1 << 64
