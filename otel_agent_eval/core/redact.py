"""Keep secrets and tool payloads out of the spans we forward.

Redaction fails closed: a value that cannot be parsed or masked (invalid or too deeply
nested JSON, too many encoding layers, an unexpected exception) is replaced by
``[REDACTED]``; it is never forwarded as it was.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from re import _parser as _sre  # the regular-expression parser: a pattern's anchors and lookarounds
from typing import Any
from urllib.parse import unquote

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event
from opentelemetry.trace import Link, Status, StatusCode

from . import conventions as c

MASK = c.REDACTED
MAX_DEPTH = 200  # nesting of one JSON value; deeper values are masked whole
MAX_LEVELS = 16  # JSON text inside a JSON string inside ...; more layers are masked whole
MAX_VIEWS = 64  # decodings of one string looked at; more and it counts as containing a key

# Tool arguments and results, whatever the span (GenAI, OpenInference, OpenLLMetry).
TOOL_IO_KEYS = frozenset({c.GEN_AI_TOOL_CALL_ARGUMENTS, c.GEN_AI_TOOL_CALL_RESULT, c.OI_TOOL_CALL_FUNCTION_ARGUMENTS,
                          c.TRACELOOP_ENTITY_INPUT, c.TRACELOOP_ENTITY_OUTPUT,
                          # google-adk's legacy schema: tool arguments and results, and the model
                          # request and response that carry them (google/adk/telemetry/tracing.py)
                          "gcp.vertex.agent.tool_call_args", "gcp.vertex.agent.tool_response",
                          "gcp.vertex.agent.llm_request", "gcp.vertex.agent.llm_response"})
# The span's own input and output: tool I/O on tool spans only (on an agent or LLM span they are not).
TOOL_SPAN_IO_KEYS = frozenset({c.OI_INPUT_VALUE, c.OI_OUTPUT_VALUE})
# Flattened tool-call arguments in message attributes: OpenInference
# `llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments`, OpenLLMetry
# `gen_ai.completion.0.tool_calls.0.arguments` and `....function_call.arguments`.
_FLAT_TOOL_ARGUMENTS = re.compile(
    r"(?:^|\.)(?:tool_call\.function\.arguments|tool_calls\.\d+\.(?:function\.)?arguments|function_call\.arguments)$")
# Attributes holding JSON message lists whose tool-call parts `drop_io` masks.
MESSAGE_KEYS = frozenset({c.GEN_AI_INPUT_MESSAGES, c.GEN_AI_OUTPUT_MESSAGES})
# The same, in the attributes of `gen_ai.*` events (`gen_ai.choice`, `gen_ai.assistant.message`).
EVENT_MESSAGE_KEYS = MESSAGE_KEYS | {"message", "tool_calls"}
TOOL_MESSAGE_EVENT = "gen_ai.tool.message"  # its `content` is a tool result
# Message parts (GenAI, OpenAI Responses, Anthropic) whose fields are tool arguments or results.
_TOOL_PART_FIELDS = {
    "tool_call": ("arguments",), "function_call": ("arguments",), "server_tool_call": ("arguments",),
    "tool_use": ("input",),
    "tool_call_response": ("response", "result", "output"), "server_tool_call_response": ("response",),
    "function_call_output": ("output",), "tool_result": ("content",),
}

# -- decoding: what a key may look like once its escapes are undone ---------------------

_ESCAPE = re.compile(r'\\(?:u([0-9a-fA-F]{4})|(["\\/bfnrt]))')
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _unescape_one(m: re.Match[str]) -> str:
    return chr(int(m.group(1), 16)) if m.group(1) else _SIMPLE_ESCAPES[m.group(2)]


def _join_pair(m: re.Match[str]) -> str:
    return m.group().encode("utf-16-le", "surrogatepass").decode("utf-16-le")


def _unescape(text: str) -> str:
    """One layer of JSON string escapes undone, wherever they are; other backslashes stay."""
    out = _ESCAPE.sub(_unescape_one, text)
    return _SURROGATE_PAIR.sub(_join_pair, out) if _SURROGATE.search(out) else out


def _views(text: str) -> list[str] | None:
    """`text` and every string reachable from it by undoing JSON escapes or %-encoding, in any
    order, any number of times (each step shortens the text, so this ends). None if there are
    more than MAX_VIEWS: the caller then assumes the worst."""
    seen, frontier = {text}, [text]
    while frontier:
        found = []
        for view in frontier:
            for decoded in (_unescape(view) if "\\" in view else view, unquote(view) if "%" in view else view):
                if decoded not in seen:
                    seen.add(decoded)
                    found.append(decoded)
        if len(seen) > MAX_VIEWS:
            return None
        frontier = found
    return list(seen)


def _analyse(regex: re.Pattern[str]) -> tuple[bool, re.Pattern[str] | None]:
    """What the no-match shortcut may assume of `regex` (a case-insensitive key pattern).

    First: whether a match inside a string implies a match in any text containing that
    string. True unless the pattern has anchors, word boundaries, lookarounds or conditional
    groups (`^`, `$`, `\\b`, `(?=`, `(?<!`, `(?(1)`): without them a match depends only on
    the characters it spans.

    Second: a case-sensitive equivalent to run on lower-cased ASCII text, or None. Python's
    case-insensitive search is ~8x slower than a case-sensitive one. For ASCII text it is
    enough to search the lower-cased text with the pattern compiled case-sensitively,
    provided that every literal is a lower-case or non-letter ASCII character, every
    character range holds the lower-case twin of each capital it holds, and no group turns
    case-insensitivity off. (Negated sets may only accept more there, which is harmless: the
    shortcut only has to never say "no" wrongly; keys are confirmed with the real pattern.)
    """
    try:
        tree = _sre.parse(regex.pattern, regex.flags)
    except Exception:  # noqa: BLE001 - an unknown parser: no shortcut
        return False, None
    assertions = {_sre.AT, _sre.ASSERT, _sre.ASSERT_NOT, _sre.GROUPREF_EXISTS}
    repeats = {_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", _sre.MAX_REPEAT)}
    plain = {_sre.NOT_LITERAL, _sre.ANY, _sre.GROUPREF, _sre.CATEGORY}
    fast = True
    stack = [tree]
    while stack:
        for op, av in stack.pop():
            if op in assertions:
                return False, None
            if op is _sre.LITERAL:
                fast = fast and _lower_ascii(av)
            elif op is _sre.IN:
                fast = fast and _lower_set(av)
            elif op is _sre.SUBPATTERN:
                fast = fast and not av[2] & re.IGNORECASE
                stack.append(av[3])
            elif op is _sre.BRANCH:
                stack.extend(av[1])
            elif op in repeats:
                stack.append(av[2])
            elif op is getattr(_sre, "ATOMIC_GROUP", None):
                stack.append(av)
            elif op not in plain:  # an operator this code does not know: no shortcut at all
                return False, None
    if not fast or not regex.flags & re.IGNORECASE:
        return True, None
    return True, re.compile(regex.pattern, regex.flags & ~re.IGNORECASE)


def _lower_ascii(code: int) -> bool:
    return code < 128 and not 65 <= code <= 90


def _lower_set(items: list[tuple[Any, Any]]) -> bool:
    if items and items[0][0] is _sre.NEGATE:
        return True
    for op, av in items:
        if op is _sre.LITERAL:
            if not _lower_ascii(av):
                return False
        elif op is _sre.RANGE:
            lo, hi = av
            if hi >= 128 or any(lo <= code <= hi and not lo <= code + 32 <= hi for code in range(65, 91)):
                return False
        elif op is not _sre.CATEGORY:
            return False
    return True


# -- free text: `key=value`, `key: value`, `"key": "value"`, URL query strings -----------------

_DELIMS = "\\s\"'=:&?#;,/{}\\[\\]()<>"
# A key: quoted (the quote itself maybe escaped, as in encoded JSON; no `=` or `:` inside, so a
# pair in quotes is read as a pair) or bare (starting after a delimiter); then `:` or `=`.
_KEY = re.compile(
    r"(?:(?<!\\)(?P<q>\\*[\"'])(?P<qkey>[^\"'\n=:]{1,256}?)(?P=q)"
    rf"|(?<![^{_DELIMS}])(?P<bkey>[^{_DELIMS}]+))"
    r"\s*[:=]\s*")
_QUOTE = re.compile(r"\\*[\"']")
# An unquoted value ends at a separator, or before the next `key=` / `key:` / quote on the line.
_BARE_END = re.compile(rf"[&;,\r\n]|\s+(?=[^{_DELIMS}]+\s*[:=]|\\*[\"'])")
_FIRST = re.compile(r"\s*(\S)")
# Characters without which a JSON key holds no pair, no JSON and no escapes, so needs no scan.
_KEY_SCAN = re.compile(r"[=:{\[\"'\\%]").search
# Control characters that text does not hold (tab, line feed and carriage return aside): bytes
# decoding to them are binary or another encoding (UTF-16's NULs), where no key can be read.
_NOT_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]").search
_STATIC_CACHE = 256  # resources kept masked: one per process, a few with several providers


class _TooDeep(Exception):
    pass


class Redactor:
    """Keeps secrets and tool payloads out of exported spans.

    `pattern` is a case-insensitive regular expression over key names (e.g.
    ``password|token|secret|api_key``). An attribute whose key matches becomes ``[REDACTED]``;
    so does the value under a matching key anywhere inside a string: JSON (parsed, at any
    encoding depth: JSON text in a JSON string, unicode-escaped keys) or free text
    (``password=hunter2``, ``api_key: sk-1``, ``token="abc"``, URL query strings, %-encoded
    keys). Sequences are redacted element by element; `events()` does the same for span
    events. Values under other keys are left as they were.

    `drop_io` removes tool arguments and results: `TOOL_IO_KEYS`, `input.value` /
    `output.value` on tool spans, flattened tool-call arguments and tool-message contents
    of message attributes, the tool-call parts' arguments and responses inside
    `gen_ai.input.messages` / `gen_ai.output.messages` and `gen_ai.*` events, and `io_keys`
    (the catalog's `attribute_mapping` arguments and result). Nothing else is dropped.
    Without `drop_io`, these keys are masked like any other value.

    Fails closed: a value that cannot be parsed or masked becomes ``[REDACTED]``.

    Cost when nothing matches: a string is parsed only if a key could match in it. With a
    pattern free of anchors and lookarounds, a match inside a key is a match inside any text
    containing the key, so if the pattern is not found in the string, and not in the string
    with its JSON escapes (``\\u0070``) and %-escapes undone (tried only when it has a
    backslash or a ``%``), no key in it can match and it is left as it is, unparsed. A
    pattern with anchors or lookarounds (``^token$``) gets no such shortcut: every string
    is scanned.
    """

    IO_KEYS = (c.GEN_AI_TOOL_CALL_ARGUMENTS, c.GEN_AI_TOOL_CALL_RESULT, c.OI_INPUT_VALUE, c.OI_OUTPUT_VALUE,
               c.TRACELOOP_ENTITY_INPUT, c.TRACELOOP_ENTITY_OUTPUT, c.OI_TOOL_CALL_FUNCTION_ARGUMENTS)
    MASK = MASK

    def __init__(self, pattern: str | None = None, drop_io: bool = False, *, io_keys: Iterable[str | None] = ()) -> None:
        if isinstance(pattern, re.Pattern):
            pattern, flags = pattern.pattern, pattern.flags | re.IGNORECASE
        else:
            flags = re.IGNORECASE
        self.pattern = re.compile(pattern, flags) if pattern else None
        self.drop_io = drop_io
        self.io_keys = frozenset(k for k in io_keys if k)
        self._drop_keys = TOOL_IO_KEYS | self.io_keys
        self._search = self.pattern.search if self.pattern is not None else None
        self._prefilter, fast = _analyse(self.pattern) if self.pattern is not None else (False, None)
        self._fast = fast.search if fast is not None else None
        self._keys: dict[str, bool] = {}  # attribute names repeat: what the pattern said of each
        self._resources: dict[int, tuple[Any, Any]] = {}  # id -> (resource, its masked copy): spans share one

    # -- public ------------------------------------------------------------------------

    def apply(self, attrs: dict[str, Any]) -> None:
        """Redact `attrs` in place (it is the copy being exported); never raises."""
        try:
            self._apply(attrs, _is_tool_span(attrs), MESSAGE_KEYS)
        except Exception:  # noqa: BLE001 - fail closed: nothing of this span goes out unchecked
            for key in list(attrs):
                attrs[key] = MASK

    def events(self, events: Iterable[Event] | None) -> tuple[Event, ...]:
        """The events with their attributes redacted like `apply`'s; unchanged events are returned as they are."""
        out = []
        for event in events or ():
            try:
                out.append(self._event(event))
            except Exception:  # noqa: BLE001 - fail closed
                out.append(_masked_event(event))
        return tuple(out)

    def text(self, value: Any) -> Any:
        """One value outside an attribute map (a span name, a status description, an evaluation's
        explanation) redacted as an attribute value under a key that does not match: JSON walked,
        `key=value` text and URL queries masked. MASK if that fails."""
        if self._search is None or value is None:  # drop_io alone: names and descriptions hold no tool I/O
            return value
        try:
            if type(value) is not str:
                return self._other(value)
            if (self._fast is not None and value.isascii() and self._fast(value.lower()) is None
                    and "\\" not in value and "%" not in value):
                return value  # the usual case: no key can match
            return self._text(value, 0, True) if self._suspect(value) else value
        except Exception:  # noqa: BLE001 - fail closed
            return MASK

    def span_fields(self, name: Any, status: Any, links: Any, resource: Any) -> tuple[Any, Any, Any, Any]:
        """A span's name, status, links and resource as `text`, `status`, `links` and `resource` give
        them: what an exported copy carries besides its attributes and events (each the same object
        if nothing in it changed)."""
        if self._search is None:  # drop_io alone: none of these hold tool I/O
            return name, status, links, resource
        try:
            if status is None or status.description:
                status = self.status(status)
            if links:
                links = self.links(links)
        except Exception:  # noqa: BLE001 - fail closed: an unreadable status or links object
            status, links = self.status(status), ()
        return self.text(name), status, links, self.resource(resource)

    def status(self, status: Any) -> Any:
        """The span status, with its description masked like `text` (a new Status only if it changed)."""
        try:
            description = status.description
            if not description or self._search is None:
                return status
            masked = self.text(description)
            return status if masked is description else Status(status.status_code, masked)
        except Exception:  # noqa: BLE001 - fail closed: the code without a description
            return Status(getattr(status, "status_code", StatusCode.UNSET))

    def links(self, links: Any) -> Any:
        """The span's links with their attributes redacted like `apply`'s; `links` itself if none changed."""
        if not links:
            return links
        out, changed = [], False
        for link in links:
            try:
                attrs = self._mapping(link.attributes, MESSAGE_KEYS)
                new = link if attrs is None else Link(link.context, attrs)
            except Exception:  # noqa: BLE001 - fail closed: the link without attributes
                new = _masked_link(link)
            changed = changed or new is not link
            out.append(new)
        return tuple(out) if changed else links

    def resource(self, resource: Any) -> Any:
        """The resource with its attributes redacted like `apply`'s, worked out once per resource
        object (every span of a provider shares one); the resource itself if nothing changed."""
        cached = self._resources.get(id(resource))
        if cached is not None and cached[0] is resource:
            return cached[1]
        try:
            attrs = self._mapping(resource.attributes, MESSAGE_KEYS)
            masked = resource if attrs is None else Resource(attrs, getattr(resource, "schema_url", None))
        except Exception:  # noqa: BLE001 - fail closed: a resource without attributes
            masked = Resource({})
        if len(self._resources) >= _STATIC_CACHE:
            self._resources.clear()
        self._resources[id(resource)] = (resource, masked)  # the original kept: its id is not reused
        return masked

    # -- attributes --------------------------------------------------------------------

    def _apply(self, attrs: dict[str, Any], tool_span: bool, message_keys: frozenset[str]) -> None:
        if self.drop_io:
            self._drop(attrs, tool_span)
        force_keys = message_keys if self.drop_io else ()
        if self._search is None:  # drop_io alone: only message lists are left to look into
            for key in force_keys:
                value = attrs.get(key)
                if type(value) is str:
                    try:
                        attrs[key] = self._text(value, 0, False)
                    except Exception:  # noqa: BLE001 - fail closed, this value only
                        attrs[key] = MASK
            return
        key_matches, suspect, known, fast = self._key_matches, self._suspect, self._keys.get, self._fast
        for key, value in attrs.items():  # only values are replaced: the dict keeps its size
            try:
                hit = known(key) if type(key) is str else None
                if hit or (hit is None and key_matches(key)):
                    attrs[key] = MASK
                elif type(value) is str:
                    forced = key in force_keys
                    if (fast is not None and not forced and value.isascii() and fast(value.lower()) is None
                            and "\\" not in value and "%" not in value):
                        continue  # the usual case, inlined: no key can match in this string
                    is_suspect = suspect(value)
                    if is_suspect or forced:
                        new = self._text(value, 0, is_suspect)
                        if new is not value:
                            attrs[key] = new
                elif value is None or type(value) in (bool, int, float):
                    continue
                else:
                    new = self._other(value)
                    if new is not value:
                        attrs[key] = new
            except Exception:  # noqa: BLE001 - fail closed, this value only
                attrs[key] = MASK

    def _drop(self, attrs: dict[str, Any], tool_span: bool) -> None:
        drop, doomed, tool_messages = self._drop_keys, [], []
        for key, value in attrs.items():
            if (key in drop or (tool_span and key in TOOL_SPAN_IO_KEYS)
                    or (type(key) is str and "arguments" in key and _FLAT_TOOL_ARGUMENTS.search(key))):
                doomed.append(key)
            elif type(value) is str and value == "tool" and type(key) is str and key.endswith("role"):
                tool_messages.append(key[:-4] + "content")  # `gen_ai.prompt.3.role` -> `gen_ai.prompt.3.content*`
        for prefix in tool_messages:
            doomed += [key for key in attrs if type(key) is str and key.startswith(prefix)]
        for key in doomed:
            attrs.pop(key, None)

    def _event(self, event: Event) -> Event:
        original = event.attributes
        if not original:
            return event
        name = event.name if isinstance(event.name, str) else ""
        genai = name.startswith("gen_ai.")
        drop_content = self.drop_io and genai and (name == TOOL_MESSAGE_EVENT or original.get("role") == "tool")
        attrs = self._mapping(original, EVENT_MESSAGE_KEYS if genai else MESSAGE_KEYS, drop_content)
        return event if attrs is None else Event(event.name, attrs, event.timestamp)

    def _mapping(self, original: Mapping[str, Any] | None, message_keys: frozenset[str],
                 drop_content: bool = False) -> BoundedAttributes | None:
        """The attributes of an event, a link or a resource redacted like `apply`'s (immutable, with
        their dropped count); None if nothing changed. Raises: the caller fails closed."""
        if not original:
            return None
        attrs = dict(original)
        if drop_content:
            attrs.pop("content", None)
        self._apply(attrs, False, message_keys)
        if len(attrs) == len(original) and all(k in original and original[k] is v for k, v in attrs.items()):
            return None
        return _bounded(attrs, getattr(original, "dropped", 0))

    def _other(self, value: Any) -> Any:
        """A non-string attribute value: a sequence (element by element), a mapping, or anything else."""
        if isinstance(value, (tuple, list)):
            out, changed = [], False
            for item in value:
                if type(item) is str:
                    new = self._text(item, 0, True) if self._suspect(item) else item
                elif item is None or type(item) in (bool, int, float):
                    new = item
                else:
                    new = self._other(item)
                changed = changed or new is not item
                out.append(new)
            return (tuple(out) if isinstance(value, tuple) else out) if changed else value
        if isinstance(value, Mapping):
            text = json.dumps(value, default=str)
            if not self._suspect(text):
                return value
            data = json.loads(text)
            return data if self._walk(data, 0) else value
        if isinstance(value, (bytes, bytearray, memoryview)):
            return self._bytes(value)
        return MASK if self._suspect(str(value)) else value

    def _bytes(self, value: bytes | bytearray | memoryview) -> Any:
        """Bytes that are UTF-8 text are redacted as text, and masked whole if a key is in them
        (as before); anything else (binary, UTF-16 whose NULs hide a key from any scan) cannot be
        read, so it is masked (fail closed)."""
        try:
            text = bytes(value).decode("utf-8")  # strict: not UTF-8, not text
        except UnicodeDecodeError:
            return MASK
        if _NOT_TEXT(text) is not None:
            return MASK
        if not self._suspect(text):
            return value
        return value if self._text(text, 0, True) is text else MASK

    # -- strings -----------------------------------------------------------------------

    def _maybe(self, text: str) -> bool:
        """The pattern may match in `text` (exact, or a superset on lower-cased ASCII text: see `_analyse`)."""
        if self._fast is not None and text.isascii():
            return self._fast(text.lower()) is not None
        return self._search(text) is not None

    def _found(self, text: str) -> bool:
        """The pattern matches in `text`: the cheap test first, then the real one."""
        return self._maybe(text) and self._search(text) is not None

    def _key_matches(self, key: Any) -> bool:
        """Whether `key` matches the pattern, as it is or once its JSON escapes and %-escapes are undone."""
        if self._search is None:
            return False
        if type(key) is not str:
            key = str(key)
        known = self._keys.get(key)
        if known is not None:
            return known
        found = self._found(key)
        if not found and ("\\" in key or "%" in key):
            views = _views(key)
            found = views is None or any(self._found(view) for view in views)
        if len(key) <= 256:
            if len(self._keys) >= 10_000:  # unbounded names (keys inside JSON): start over
                self._keys.clear()
            self._keys[key] = found
        return found

    def _suspect(self, text: str) -> bool:
        """False only if no key in `text` can match, however it is encoded (see the class docstring)."""
        if self._search is None:
            return False
        if not self._prefilter or self._maybe(text):
            return True
        if "\\" in text or "%" in text:
            views = _views(text)
            return views is None or any(self._maybe(view) for view in views)
        return False

    def _text(self, text: str, level: int, suspect: bool) -> str:
        """`text` redacted: JSON parsed and walked, free text scanned; MASK if it cannot be parsed."""
        if level > MAX_LEVELS:
            return MASK
        first = _FIRST.match(text)
        head = first.group(1) if first else ""
        if head in ("{", "[") or (head == '"' and text.rstrip().endswith('"')):
            try:
                value = json.loads(text)
            except (ValueError, RecursionError):
                return MASK
            if isinstance(value, str):
                inner = self._text(value, level + 1, True) if self._suspect(value) else value
                return text if inner is value else _dumps(inner)
            if isinstance(value, (dict, list)):
                try:
                    changed = self._walk(value, level)
                except (_TooDeep, RecursionError):
                    return MASK
                return _dumps(value) if changed else text
            return text
        return self._free_text(text) if suspect else text

    def _walk(self, root: dict | list, level: int) -> bool:
        """Mask parsed JSON in place, iteratively; True if anything changed. Raises _TooDeep past MAX_DEPTH."""
        changed = False
        stack: list[tuple[Any, int]] = [(root, 1)]
        key_matches, suspect, drop_io, key_scan = self._key_matches, self._suspect, self.drop_io, _KEY_SCAN
        known, fast = self._keys.get, self._fast
        while stack:
            node, depth = stack.pop()
            if depth > MAX_DEPTH:
                raise _TooDeep
            if type(node) is dict:
                if drop_io and _drop_tool_parts(node):
                    changed = True
                renamed = None
                for key, value in node.items():
                    if key_scan(key) and suspect(key):  # a key may itself hold `token=...`, JSON, escapes
                        new_key = self._text(key, level + 1, True)
                        if new_key is not key:
                            renamed = renamed or {}
                            renamed[key] = new_key
                    hit = known(key)
                    if hit or (hit is None and key_matches(key)):
                        node[key] = MASK
                        changed = True
                    elif type(value) is str:
                        if not (fast is not None and value.isascii() and fast(value.lower()) is None
                                and "\\" not in value and "%" not in value) and suspect(value):
                            new = self._text(value, level + 1, True)
                            if new is not value:
                                node[key] = new
                                changed = True
                    elif type(value) in (dict, list):
                        stack.append((value, depth + 1))
                if renamed:
                    items = [(renamed.get(k, k), v) for k, v in node.items()]
                    node.clear()
                    node.update(items)
                    changed = True
            elif type(node) is list:
                for i, value in enumerate(node):
                    if type(value) is str:
                        if not (fast is not None and value.isascii() and fast(value.lower()) is None
                                and "\\" not in value and "%" not in value) and suspect(value):
                            new = self._text(value, level + 1, True)
                            if new is not value:
                                node[i] = new
                                changed = True
                    elif type(value) in (dict, list):
                        stack.append((value, depth + 1))
        return changed

    def _free_text(self, text: str) -> str:
        """Mask the values of matching keys in `key=value` / `key: value` text.

        If a key could still match after that, but only once escapes are undone (an encoded
        key the scanner did not read as one), the whole text is masked."""
        parts: list[str] = []
        kept: list[str] = []
        last = pos = 0
        while True:
            m = _KEY.search(text, pos)
            if m is None:
                break
            key = m.group("qkey") if m.group("q") is not None else m.group("bkey")
            if not self._key_matches(key):
                pos = m.end()
                continue
            end, quote = _value_span(text, m.end())
            parts += (text[last:m.end()], quote, MASK, quote)
            kept.append(text[last:m.start()])
            last = pos = end
        if not parts:
            return MASK if self._hidden(text) else text
        parts.append(text[last:])
        kept.append(text[last:])
        return MASK if self._hidden(" ".join(kept)) else "".join(parts)

    def _hidden(self, text: str) -> bool:
        """A key may match in `text` only through escapes: the free-text scan missed it."""
        if self._found(text) or ("\\" not in text and "%" not in text):
            return False
        views = _views(text)
        return views is None or any(self._found(view) for view in views)


def _value_span(text: str, start: int) -> tuple[int, str]:
    """Where the value starting at `start` ends, and its quote ('' if unquoted). To the end if unterminated."""
    m = _QUOTE.match(text, start)
    if m:
        quote, j = m.group(), m.end()
        while True:
            j = text.find(quote, j)
            if j < 0:
                return len(text), quote
            if text[j - 1] != "\\":
                return j + len(quote), quote
            j += 1
    if text[start:start + 1] in ("{", "["):  # a structure: to the end of the line, whatever it holds
        end = text.find("\n", start)
        return (len(text) if end < 0 else end), ""
    m = _BARE_END.search(text, start)
    return (m.start() if m else len(text)), ""


def _drop_tool_parts(node: dict) -> bool:
    """`drop_io` inside a message structure: mask a tool call's arguments and a tool result."""
    changed = False
    kind = node.get("type")
    fields = _TOOL_PART_FIELDS.get(kind, ()) if type(kind) is str else ()
    if node.get("role") == "tool":
        fields = (*fields, "content")
    for name in fields:
        if name in node and node[name] != MASK:
            node[name] = MASK
            changed = True
    function = node.get("function")  # OpenAI chat `tool_calls[].function.arguments`
    if type(function) is dict and "arguments" in function and function["arguments"] != MASK:
        function["arguments"] = MASK
        changed = True
    return changed


def _dumps(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a \ud800 escape: keep it escaped
        text = json.dumps(value)
    return text


def _is_tool_span(attrs: Mapping[str, Any]) -> bool:
    return (attrs.get(c.GEN_AI_OPERATION_NAME) == c.OP_EXECUTE_TOOL or attrs.get(c.OPENINFERENCE_SPAN_KIND) == c.OI_KIND_TOOL
            or attrs.get(c.TRACELOOP_SPAN_KIND) == c.TL_KIND_TOOL)


def _bounded(attrs: dict[str, Any], dropped: int) -> BoundedAttributes:
    try:
        bounded = BoundedAttributes(attributes=attrs, immutable=True, extended_attributes=True)
    except TypeError:  # an SDK without extended attributes
        bounded = BoundedAttributes(attributes=attrs, immutable=True)
    bounded.dropped = dropped if type(dropped) is int else 0
    return bounded


def _masked_link(link: Any) -> Link:
    """The link with every attribute masked (what could not be redacted goes out as nothing)."""
    try:
        keys = [str(k) for k in (link.attributes or {})]
    except Exception:  # noqa: BLE001
        keys = []
    return Link(getattr(link, "context", None), {k: MASK for k in keys})


def _masked_event(event: Any) -> Event:
    """The event with every attribute masked (what could not be redacted goes out as nothing)."""
    try:
        keys = [str(k) for k in (event.attributes or {})]
    except Exception:  # noqa: BLE001
        keys = []
    name = getattr(event, "name", "")
    return Event(name if isinstance(name, str) else "event", {k: MASK for k in keys}, getattr(event, "timestamp", None))
