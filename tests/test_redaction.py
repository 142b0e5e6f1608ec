"""Redaction fails closed (issue #12): no secret leaves in a forwarded span, whatever its encoding.

Secrets sit under keys matching `password|token|secret|api_key` in attributes and events,
in JSON (nested, double-encoded, unicode-escaped keys), in `key=value` text, in arrays. Each
leak found by an attacker has a concrete test; the hypothesis tests place secrets at random.
"""
from __future__ import annotations

import json
import re
import warnings
from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import Event

from otel_agent_eval.core import redact
from otel_agent_eval.core.redact import Redactor

MASK = "[REDACTED]"
PATTERN = "password|token|secret|api_key"
S = "QX7Y9Z2W5HUNTER2VALUE"  # the secret in concrete tests; appears nowhere else


def redacted(attrs: dict[str, Any], pattern: str | None = PATTERN, drop_io: bool = False, **kw: Any) -> dict[str, Any]:
    out = dict(attrs)
    Redactor(pattern, drop_io, **kw).apply(out)
    return out


def event_dict(event: Event) -> dict[str, Any]:
    return {"name": event.name, "attributes": dict(event.attributes or {}), "timestamp": event.timestamp}


def serialised(value: Any) -> str:
    if isinstance(value, Event):
        value = event_dict(value)
    elif isinstance(value, (tuple, list)) and value and all(isinstance(v, Event) for v in value):
        value = [event_dict(v) for v in value]
    return json.dumps(value, default=str)


def decodings(text: str, limit: int = 12) -> set[str]:
    """`text` with backslash escapes and %-escapes undone, any number of times in any order."""
    seen, todo = {text}, [text]
    while todo and len(seen) < 200:
        current = todo.pop()
        found = [unquote(current)]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # "invalid escape sequence"
                found.append(current.encode("ascii", "backslashreplace").decode("unicode_escape"))
        except (UnicodeDecodeError, ValueError):
            found.append(re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), current).replace("\\\\", "\\"))
        for decoded in found:
            if decoded not in seen and len(seen) < 200:
                seen.add(decoded)
                todo.append(decoded)
    return seen


def leaks(secret: str, value: Any) -> bool:
    return any(secret in text for text in decodings(serialised(value)))


def assert_no_leak(value: Any, secret: str = S) -> None:
    assert not leaks(secret, value), f"secret left in {serialised(value)[:2000]}"


# -- the redactor's API ------------------------------------------------------------------


def test_api():
    r = Redactor(PATTERN, True, io_keys=("app.args", None))
    assert Redactor.MASK == redact.MASK == MASK
    assert r.events(()) == () and r.events(None) == ()
    with pytest.raises(TypeError):
        Redactor(PATTERN, False, ("app.args",))  # io_keys is keyword-only


def test_span_fields_api():
    """Name, status, links and resource: masked copies when something matched, the same objects otherwise."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.trace import Link, Status, StatusCode

    r = Redactor(PATTERN)
    status, plain_status = Status(StatusCode.ERROR, f"failed: token={S}"), Status(StatusCode.ERROR, "timeout")
    links, plain_links = (Link(None, {"app.secret": S, "n": 1}),), (Link(None, {"n": 1}),)
    resource, plain_resource = Resource({"service.name": "svc", "api_key": S}), Resource({"service.name": "svc"})
    name, new_status, new_links, new_resource = r.span_fields(f"GET /x?token={S}", status, links, resource)
    assert name == f"GET /x?token={MASK}" and new_status.status_code is StatusCode.ERROR
    assert new_status.description == f"failed: token={MASK}"
    assert dict(new_links[0].attributes) == {"app.secret": MASK, "n": 1}
    assert dict(new_resource.attributes) == {"service.name": "svc", "api_key": MASK}
    assert r.resource(resource) is new_resource  # cached per resource object
    assert_no_leak([name, new_status.description, dict(new_links[0].attributes), dict(new_resource.attributes)])
    unchanged = ("GET /plain", plain_status, plain_links, plain_resource)
    assert all(a is b for a, b in zip(r.span_fields(*unchanged), unchanged))
    assert all(a is b for a, b in zip(Redactor(None, True).span_fields(name, status, links, resource),
                                      (name, status, links, resource)))  # drop_io alone: nothing to mask there
    assert r.text(None) is None and r.text(f"api_key={S}") == f"api_key={MASK}" and r.text(HostileString(f"token={S}")) == MASK


def test_bytes_are_read_as_utf8_text_or_masked():
    r = Redactor(PATTERN)
    plain = b"no keys here"
    out = {"plain": plain, "pair": f"password={S}".encode(), "utf16": f"password={S}".encode("utf-16-le"),
           "utf16be": f"token={S}".encode("utf-16-be"), "binary": b"\x89PNG\r\n\x1a\n" + S.encode(), "latin1": f"clé token={S}".encode("latin-1")}
    r.apply(out)
    assert out["plain"] is plain
    assert {k: v for k, v in out.items() if k != "plain"} == dict.fromkeys(("pair", "utf16", "utf16be", "binary", "latin1"), MASK)


# -- events ------------------------------------------------------------------------------


def test_tool_message_event_content_is_redacted():
    event = Event("gen_ai.tool.message", {"content": json.dumps({"token": S, "rows": 3}), "id": "call_1"}, 1234)
    (out,) = Redactor(PATTERN).events((event,))
    assert isinstance(out, Event) and out.name == "gen_ai.tool.message" and out.timestamp == 1234
    assert json.loads(out.attributes["content"]) == {"token": MASK, "rows": 3}
    assert out.attributes["id"] == "call_1"


def test_choice_event_message_and_content_are_redacted():
    message = {"role": "assistant", "content": f"api_key: {S}",
               "tool_calls": [{"id": "c1", "type": "function",
                               "function": {"name": "login", "arguments": json.dumps({"user": "bob", "password": S})}}]}
    event = Event("gen_ai.choice", {"index": 0, "finish_reason": "tool_calls", "message": json.dumps(message),
                                    "content": json.dumps({"secret": S})}, 5)
    (out,) = Redactor(PATTERN).events([event])
    assert_no_leak(out)
    kept = json.loads(out.attributes["message"])
    assert json.loads(kept["tool_calls"][0]["function"]["arguments"]) == {"user": "bob", "password": MASK}
    assert kept["content"] == f"api_key: {MASK}"
    assert out.attributes["finish_reason"] == "tool_calls" and out.attributes["index"] == 0


def test_any_event_attribute_is_redacted_and_unchanged_events_are_the_same_objects():
    leaky = Event("exception", {"exception.type": "AuthError", "exception.message": f"login failed: password={S}",
                                "app.session_token": S, "exception.stacktrace": f'connect(token="{S}")'}, 7)
    clean = Event("retry", {"attempt": 2, "note": "the token was fine"}, 8)
    out = Redactor(PATTERN).events([leaky, clean])
    assert isinstance(out, tuple) and len(out) == 2
    assert_no_leak(out)
    assert out[0].attributes["exception.type"] == "AuthError"
    assert out[0].attributes["app.session_token"] == MASK
    assert out[0].attributes["exception.message"] == f"login failed: password={MASK}"
    assert out[1] is clean


def test_event_attributes_stay_immutable_and_keep_the_dropped_count():
    from opentelemetry.attributes import BoundedAttributes

    attrs = BoundedAttributes(maxlen=1, attributes={"x": "1"}, immutable=False)
    attrs["secret"] = S  # over maxlen: "x" is dropped, dropped == 1
    event = Event("e", attrs, 1)
    (out,) = Redactor(PATTERN).events([event])
    assert out.attributes["secret"] == MASK and out.dropped_attributes == 1
    with pytest.raises(TypeError):
        out.attributes["secret"] = S


# -- attributes: where secrets were left -------------------------------------------------


def test_openinference_tool_call_function_arguments():
    out = redacted({"tool_call.function.arguments": json.dumps({"city": "Paris", "api_key": S}),
                    "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": json.dumps({"password": S})})
    assert_no_leak(out)
    assert json.loads(out["tool_call.function.arguments"]) == {"city": "Paris", "api_key": MASK}


def test_openinference_tool_parameters_schema():
    schema = {"type": "object", "properties": {"query": {"type": "string"},
                                               "api_key": {"type": "string", "default": S, "examples": [S]}}}
    out = redacted({"tool.parameters": json.dumps(schema)})
    assert_no_leak(out)
    assert json.loads(out["tool.parameters"]) == {"type": "object", "properties": {"query": {"type": "string"}, "api_key": MASK}}


def test_traceloop_entity_output_and_input_value_output_value():
    out = redacted({"traceloop.entity.output": json.dumps({"result": {"access_token": S, "expires": 3600}}),
                    "input.value": json.dumps({"password": S, "user": "bob"}), "output.value": f"secret={S}"})
    assert_no_leak(out)
    assert json.loads(out["traceloop.entity.output"]) == {"result": {"access_token": MASK, "expires": 3600}}
    assert json.loads(out["input.value"]) == {"password": MASK, "user": "bob"}
    assert out["output.value"] == f"secret={MASK}"


def genai_messages() -> tuple[str, str]:
    inputs = [
        {"role": "user", "parts": [{"type": "text", "content": "log me in"}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "login",
                                         "arguments": {"user": "bob", "password": S}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1",
                                    "response": json.dumps({"session_token": S, "ok": True})}]},
    ]
    outputs = [{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "c2", "name": "fetch", "arguments": json.dumps({"url": f"https://x.test/a?token={S}&page=2"})},
        {"type": "text", "content": "done"}], "finish_reason": "tool_call"}]
    return json.dumps(inputs), json.dumps(outputs)


def test_genai_input_and_output_messages_with_tool_call_parts():
    inputs, outputs = genai_messages()
    out = redacted({"gen_ai.input.messages": inputs, "gen_ai.output.messages": outputs})
    assert_no_leak(out)
    msgs = json.loads(out["gen_ai.input.messages"])
    assert msgs[0]["parts"][0] == {"type": "text", "content": "log me in"}
    assert msgs[1]["parts"][0]["arguments"] == {"user": "bob", "password": MASK}
    assert json.loads(msgs[2]["parts"][0]["response"]) == {"session_token": MASK, "ok": True}
    (call, text) = json.loads(out["gen_ai.output.messages"])[0]["parts"]
    assert json.loads(call["arguments"]) == {"url": f"https://x.test/a?token={MASK}&page=2"} and text["content"] == "done"


def test_any_attribute_holding_json_with_a_matching_key():
    out = redacted({"app.request": json.dumps({"headers": {"X-Api-Key": "k", "authorization_token": S}}),
                    "db.statement": json.dumps([{"secret": S}]), "http.url": "https://x.test/cb?code=1&token=" + S})
    assert_no_leak(out)
    assert json.loads(out["app.request"]) == {"headers": {"X-Api-Key": "k", "authorization_token": MASK}}
    assert out["http.url"] == "https://x.test/cb?code=1&token=" + MASK


@pytest.mark.parametrize("layers", [1, 2, 3, 5])
def test_double_encoded_json_at_any_depth(layers):
    text = json.dumps({"password": S, "user": "bob"})
    for i in range(layers):
        text = json.dumps({"level": i, "payload": text})
    out = redacted({"gen_ai.tool.call.arguments": text, "app.string": json.dumps(json.dumps({"api_key": S}))})
    assert_no_leak(out)
    value = json.loads(out["gen_ai.tool.call.arguments"])
    for _ in range(layers):
        value = json.loads(value["payload"])
    assert value == {"password": MASK, "user": "bob"}
    assert json.loads(json.loads(out["app.string"])) == {"api_key": MASK}


@pytest.mark.parametrize("key", ["\\u0070assword", "p\\u0061ss\\u0077ord", "\\u0041PI_KEY", "\\u0074\\u006f\\u006b\\u0065\\u006e"])
def test_unicode_escaped_keys(key):
    text = '{"%s": "%s", "note": "ok"}' % (key, S)
    assert re.search(PATTERN, text, re.I) is None  # what a prefilter on the raw text would see
    out = redacted({"gen_ai.tool.call.result": text, "app.nested": json.dumps({"payload": text})})
    assert_no_leak(out)
    assert json.loads(out["gen_ai.tool.call.result"])["note"] == "ok"
    assert list(json.loads(out["gen_ai.tool.call.result"]).values()) == [MASK, "ok"]


@pytest.mark.parametrize("text, expected", [
    (f"password={S}", f"password={MASK}"),
    (f"connecting with api_key: {S} to eu-west", f"connecting with api_key: {MASK}"),
    (f'config token="{S}" retries=3', f'config token="{MASK}" retries=3'),
    (f"user=bob&password={S}&lang=en", f"user=bob&password={MASK}&lang=en"),
    (f"GET https://api.test/v1/items?q=shoes&api_key={S}#top", f"GET https://api.test/v1/items?q=shoes&api_key={MASK}"),
    (f"GET /v1/items?api%5Fkey={S}&q=1", f"GET /v1/items?api%5Fkey={MASK}&q=1"),
    (f"{{'client_secret': '{S}', 'id': 'app'}}", None),  # a Python dict repr: not JSON
    (f"line one\nTOKEN : {S}\nline three", f"line one\nTOKEN : {MASK}\nline three"),
    (f'err: "password": "{S}", "user": "bob"', f'err: "password": "{MASK}", "user": "bob"'),
])
def test_key_value_text(text, expected):
    out = redacted({"gen_ai.tool.call.result": text})
    assert_no_leak(out)
    if expected is not None:
        assert out["gen_ai.tool.call.result"] == expected


def test_prose_mentioning_a_key_name_is_kept():
    text = "Your password was reset; use the token from the e-mail."
    out = redacted({"gen_ai.tool.call.result": text})
    assert out["gen_ai.tool.call.result"] is text


def test_arrays_are_redacted_element_by_element():
    out = redacted({"app.args": ("--verbose", f"--password={S}", json.dumps({"token": S}), "plain"),
                    "app.list": [f"secret: {S}", "fine"], "app.numbers": (1, 2, 3)})
    assert_no_leak(out)
    assert out["app.args"] == ("--verbose", f"--password={MASK}", json.dumps({"token": MASK}), "plain")
    assert out["app.list"] == [f"secret: {MASK}", "fine"]
    assert out["app.numbers"] == (1, 2, 3)


def test_non_string_values_under_matching_keys():
    number = 987654321012345
    args = {"api_key": number, "token": 1.5e300, "secret": True, "password": None,
            "client_secret": {"value": S}, "tokens": [S, S], "n": 5}
    out = redacted({"app.config": json.dumps(args), "app.api_key": number, "app.tokens": (S, S),
                    "app.list": (json.dumps({"api_key": number}),), "app.text": f"api_key={number}"})
    assert_no_leak(out)
    assert not leaks(str(number), out)
    assert json.loads(out["app.config"]) == {k: (5 if k == "n" else MASK) for k in args}
    assert out["app.api_key"] == MASK and out["app.tokens"] == MASK


def test_catalog_mapped_io_keys_are_masked_or_dropped():
    attrs = {"acme.tool": "login", "acme.args": json.dumps({"password": S, "user": "bob"}), "acme.out": f"token={S}",
             "acme.other": "keep"}
    masked = redacted(attrs, io_keys=("acme.args", "acme.out"))
    assert_no_leak(masked)
    assert json.loads(masked["acme.args"]) == {"password": MASK, "user": "bob"} and masked["acme.other"] == "keep"
    dropped = redacted(attrs, None, True, io_keys=("acme.args", "acme.out", None))
    assert dropped == {"acme.tool": "login", "acme.other": "keep"}


# -- depth and failures ------------------------------------------------------------------


def nested(depth: int, inner: str = '{"password": "%s"}' % S) -> str:
    return '{"a": ' * depth + inner + "}" * depth


@pytest.mark.parametrize("depth", [600, 3_000, 50_000])
def test_deep_json_is_masked_whole_and_never_raises(depth):
    lists = "[" * depth + json.dumps({"token": S}) + "]" * depth
    out = redacted({"gen_ai.tool.call.arguments": nested(depth), "app.lists": lists, "app.keep": "fine"})
    assert out == {"gen_ai.tool.call.arguments": MASK, "app.lists": MASK, "app.keep": "fine"}


def test_deep_json_inside_an_event_is_masked():
    (out,) = Redactor(PATTERN).events([Event("gen_ai.tool.message", {"content": nested(3_000), "id": "c"}, 1)])
    assert dict(out.attributes) == {"content": MASK, "id": "c"}


def test_moderately_nested_json_keeps_its_structure():
    out = redacted({"gen_ai.tool.call.arguments": nested(150)})
    value = json.loads(out["gen_ai.tool.call.arguments"])
    for _ in range(150):
        value = value["a"]
    assert value == {"password": MASK}


def test_deep_json_without_a_matching_key_is_left_alone():
    text = nested(3_000, '{"query": "shoes"}')
    out = redacted({"gen_ai.tool.call.arguments": text})
    assert out["gen_ai.tool.call.arguments"] is text


@pytest.mark.parametrize("text", [
    '{"password": "%s", "query": "sho' % S,  # cut by an attribute length limit
    '[{"api_key": "%s"}' % S,
    '{"token": "%s", "n": %s}' % (S, "9" * 5_000),  # over Python's int digits limit
    '"{\\"secret\\": \\"%s\\x\\"}"' % S,  # a JSON string with a broken escape (\\x)
])
def test_unparseable_json_is_masked_whole(text):
    assert redacted({"gen_ai.tool.call.result": text})["gen_ai.tool.call.result"] == MASK


def test_json_looking_text_that_is_not_json_is_scanned_as_text():
    text = 'unterminated {\\"secret\\": \\"%s\\", \\"user\\": \\"bob\\"' % S  # encoded JSON, cut
    assert redacted({"app.log": text})["app.log"] == 'unterminated {\\"secret\\": \\"%s\\", \\"user\\": \\"bob\\"' % MASK


class HostileString(str):
    """A str subclass whose methods fail: it must not slip through as a plain string."""

    def __getattribute__(self, name: str) -> Any:
        if name in ("lstrip", "rstrip", "strip", "isascii", "lower", "encode", "startswith", "endswith", "find"):
            raise RuntimeError("boom")
        return super().__getattribute__(name)


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no")

    __repr__ = __str__


def test_an_exception_masks_the_value_and_never_propagates():
    attrs = {"gen_ai.tool.call.arguments": HostileString(json.dumps({"password": S})), "app.odd": Unprintable(),
             "app.odd_list": ("a", Unprintable()), "app.keep": "fine", "app.n": 3}
    out = redacted(attrs)
    assert out == {"gen_ai.tool.call.arguments": MASK, "app.odd": MASK, "app.odd_list": MASK, "app.keep": "fine", "app.n": 3}


class ExplodingAttributes(dict):
    def __iter__(self):
        raise RuntimeError("no")

    def items(self):
        raise RuntimeError("no")

    def keys(self):
        raise RuntimeError("no")


def test_an_event_that_cannot_be_read_goes_out_without_attributes():
    (out,) = Redactor(PATTERN).events([Event("gen_ai.choice", ExplodingAttributes(message=S), 9)])
    assert out.name == "gen_ai.choice" and out.timestamp == 9
    assert_no_leak(out)


def test_unusual_patterns_still_redact():
    text = json.dumps({"password": S, "my_password": "kept", "Api-Key": S})
    anchored = redacted({"x": text}, "^(password|api.key)$")  # anchors: no shortcut, every string is scanned
    assert json.loads(anchored["x"]) == {"password": MASK, "my_password": "kept", "Api-Key": MASK}
    upper = redacted({"x": text, "app.API_KEY": S}, "API.KEY|[A-Z]+WORD")  # capitals and a range
    assert json.loads(upper["x"]) == {"password": MASK, "my_password": MASK, "Api-Key": MASK} and upper["app.API_KEY"] == MASK


@pytest.mark.parametrize("pattern", ["API_KEY|PASSWORD", "[A-Z]pi_key", "Api[_-]Key", "(?:x|A)pi_key"])
def test_capitals_in_the_pattern_match_any_case(pattern):  # the lower-case shortcut must not apply
    out = redacted({"app.config": json.dumps({"api_key": S, "n": 1}), "app.url": f"/x?api_key={S}"}, pattern)
    assert json.loads(out["app.config"])["api_key"] == MASK and out["app.url"] == f"/x?api_key={MASK}"


def test_an_escaped_key_in_free_text_masks_the_text():
    text = "log: payload=\\u0070assword\\u003d%s done" % S  # an escaped `password=...` the scanner cannot pair
    assert redacted({"app.log": text})["app.log"] == MASK


def test_non_ascii_case_variants_of_a_key():
    # Python's case-insensitive matching equates s with the long s and k with the Kelvin sign.
    text = json.dumps({"pa\u017fsword": S, "api_\u212aey": S, "n": 1}, ensure_ascii=False)
    out = redacted({"app.result": text, "app.arguments": json.dumps(json.loads(text))})
    assert_no_leak(out)
    assert json.loads(out["app.result"]) == {"pa\u017fsword": MASK, "api_\u212aey": MASK, "n": 1}


# -- drop_io -----------------------------------------------------------------------------


def test_drop_io_drops_every_tool_io_place_and_nothing_else():
    inputs, outputs = genai_messages()
    attrs = {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "login", "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.call.arguments": "{}", "gen_ai.tool.call.result": "ok",
        "tool_call.function.arguments": "{}", "input.value": "x", "output.value": "y",
        "traceloop.entity.input": "{}", "traceloop.entity.output": "{}", "acme.args": "a", "acme.result": "r",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{}",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "login",
        "gen_ai.completion.0.tool_calls.0.arguments": "{}", "gen_ai.completion.0.tool_calls.0.name": "login",
        "llm.input_messages.1.message.role": "tool", "llm.input_messages.1.message.content": "rows",
        "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "hi",
        "gen_ai.prompt.2.role": "tool", "gen_ai.prompt.2.content": "rows",
        "gen_ai.input.messages": inputs, "gen_ai.output.messages": outputs,
        "tool.parameters": '{"type": "object"}', "app.note": "hello", "gen_ai.agent.name": "support",
        # google-adk's legacy schema
        "gcp.vertex.agent.tool_call_args": '{"user": "ann"}', "gcp.vertex.agent.tool_response": '{"token": "t"}',
        "gcp.vertex.agent.llm_request": "{}", "gcp.vertex.agent.llm_response": "{}",
    }
    out = redacted(attrs, None, True, io_keys=("acme.args", "acme.result"))
    assert out.keys() == {
        "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name", "gen_ai.completion.0.tool_calls.0.name",
        "llm.input_messages.1.message.role", "llm.input_messages.0.message.role", "llm.input_messages.0.message.content",
        "gen_ai.prompt.2.role", "gen_ai.input.messages", "gen_ai.output.messages", "tool.parameters", "app.note",
        "gen_ai.agent.name"}
    assert all(out[k] is attrs[k] for k in out if not k.endswith("messages"))
    msgs = json.loads(out["gen_ai.input.messages"])
    assert msgs[0]["parts"] == [{"type": "text", "content": "log me in"}]
    assert msgs[1]["parts"][0] == {"type": "tool_call", "id": "c1", "name": "login", "arguments": MASK}
    assert msgs[2]["parts"][0] == {"type": "tool_call_response", "id": "c1", "response": MASK}
    assert json.loads(out["gen_ai.output.messages"])[0]["parts"][1] == {"type": "text", "content": "done"}
    assert_no_leak(out)


@pytest.mark.parametrize("kind", [{"openinference.span.kind": "AGENT"}, {"gen_ai.operation.name": "invoke_agent"}])
def test_drop_io_keeps_input_value_on_spans_that_are_not_tool_spans(kind):
    attrs = {**kind, "input.value": "What is the return policy?", "output.value": "30 days"}
    assert redacted(attrs, None, True) == attrs


@pytest.mark.parametrize("kind", [{"openinference.span.kind": "TOOL"}, {"traceloop.span.kind": "tool"},
                                  {"gen_ai.operation.name": "execute_tool"}])
def test_drop_io_drops_input_value_on_tool_spans(kind):
    assert redacted({**kind, "input.value": "{}", "output.value": "[]"}, None, True) == kind


def test_drop_io_in_events():
    message = {"role": "assistant", "content": "calling",
               "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "login", "arguments": '{"user": "bob"}'}}]}
    events = [Event("gen_ai.tool.message", {"content": '{"rows": 3}', "id": "c1", "role": "tool"}, 1),
              Event("gen_ai.choice", {"index": 0, "message": json.dumps(message)}, 2),
              Event("gen_ai.user.message", {"content": "hello"}, 3),
              Event("note", {"gen_ai.tool.call.arguments": "{}", "text": "kept"}, 4)]
    out = Redactor(None, True).events(events)
    assert dict(out[0].attributes) == {"id": "c1", "role": "tool"}
    choice = json.loads(out[1].attributes["message"])
    assert choice["tool_calls"][0]["function"] == {"name": "login", "arguments": MASK} and choice["content"] == "calling"
    assert out[2] is events[2]
    assert dict(out[3].attributes) == {"text": "kept"}


def test_drop_io_with_a_pattern_does_both():
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.arguments": json.dumps({"password": S}),
             "app.config": json.dumps({"token": S, "region": "eu"})}
    out = redacted(attrs, PATTERN, True)
    assert out.keys() == {"gen_ai.operation.name", "app.config"}
    assert json.loads(out["app.config"]) == {"token": MASK, "region": "eu"}


# -- properties --------------------------------------------------------------------------

# Secrets: capitals and digits, found nowhere else. Filler: lower-case letters that cannot
# spell a matching key (no c, k or w: no "secret", "token", "api_key", "password") and no
# digits (so no \u escape or %-escape can spell one either).
secrets = st.from_regex(r"Q[XYZ0-9]{10,16}", fullmatch=True)
int_secrets = st.integers(10**14, 10**15)
filler = st.text(alphabet="abdefghijlmnopqrsuvxyz", min_size=1, max_size=8)
plain_keys = st.sampled_from(["password", "api_key", "token", "secret", "user_password", "PASSWORD", "Api_Key",
                              "refresh_token", "clientSecret", "x.auth.token"])


@st.composite
def escaped_keys(draw: st.DrawFn) -> str:
    """A matching key as it may appear inside a JSON string literal: some characters \\u-escaped, or %-escaped."""
    key = draw(plain_keys)
    escape = draw(st.lists(st.sampled_from(["", "u", "%"]), min_size=len(key), max_size=len(key)))
    return "".join(f"\\u{ord(ch):04x}" if e == "u" else f"%{ord(ch):02X}" if e == "%" else ch for ch, e in zip(key, escape))


@st.composite
def text_pairs(draw: st.DrawFn, secret: str) -> str:
    """Free text with `key=value`, `key: value`, `key="value"` or a URL query holding the secret."""
    key = draw(plain_keys)
    encoding = draw(st.sampled_from(["plain", "percent", "unicode"]))
    if encoding == "percent":
        key = "".join(f"%{ord(ch):02X}" if draw(st.booleans()) else ch for ch in key)
    elif encoding == "unicode":  # a literal \u0070 in the text
        key = "".join(f"\\u{ord(ch):04x}" if draw(st.booleans()) else ch for ch in key)
    form = draw(st.sampled_from(["{k}={v}", "{k}: {v}", '{k}="{v}"', "{k} = '{v}'", "https://h.test/p?{f}={f}&{k}={v}&{f}=1",
                                 "{f} {k}:{v}\n{f}", "{f}={f}; {k}={v}; {f}={f}"]))
    before, after = draw(filler), draw(filler)
    return f"{before} " + form.format(k=key, v=secret, f=draw(filler)) + f" {after}"


@st.composite
def leaky_value(draw: st.DrawFn) -> tuple[str, str, str, int]:
    """(attribute text, secret, sentinel kept under a non-matching key, nesting depth)."""
    secret = draw(secrets)
    depth = draw(st.one_of(st.integers(0, 12), st.integers(0, 3_000)))
    payload = draw(st.sampled_from(["json", "json_int", "escaped_key", "text"]))
    if payload == "json":
        inner = json.dumps({draw(filler): draw(filler), draw(plain_keys): secret})
    elif payload == "json_int":
        number = draw(int_secrets)
        secret = str(number)
        inner = '{"%s": %d, "%s": "%s"}' % (draw(plain_keys), number, draw(filler), draw(filler))
    elif payload == "escaped_key":
        inner = '{"%s": "%s"}' % (draw(escaped_keys()), secret)
    else:
        inner = json.dumps(draw(text_pairs(secret)))  # a JSON string holding the text
    encode_at = set(draw(st.lists(st.integers(0, max(depth - 1, 0)), max_size=3))) if depth else set()
    prefix: list[str] = []
    suffix: list[str] = []
    text = inner
    for level in range(depth):  # inner to outer
        if level in encode_at:  # from here out, everything inside is a JSON string
            text = json.dumps("".join(reversed(prefix)) + text + "".join(suffix))
            prefix, suffix = [], []
        if draw(st.booleans()):
            prefix.append('{"%s": "%s", "%s": ' % (draw(filler), draw(filler), draw(filler)))
            suffix.append("}")
        else:
            prefix.append('["%s", ' % draw(filler))
            suffix.append("]")
    text = "".join(reversed(prefix)) + text + "".join(suffix)
    sentinel = "keep" + draw(filler)
    if draw(st.booleans()):  # one more level on top, with the sentinel beside
        text = '{"%s": "%s", "payload": %s}' % ("note", sentinel, text)
    else:
        sentinel = ""
    if payload == "text" and depth == 0 and not sentinel and draw(st.booleans()):
        text = json.loads(text)  # the bare text, not a JSON string
    return text, secret, sentinel, depth


@st.composite
def leaky_span(draw: st.DrawFn) -> tuple[dict[str, Any], list[Event], str, str, int, str]:
    text, secret, sentinel, depth = draw(leaky_value())
    placement = draw(st.sampled_from(["attribute", "io_attribute", "array", "event", "top_level_key"]))
    attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search", "app.plain": "hello"}
    events = [Event("gen_ai.content.prompt", {"gen_ai.prompt": "what now"}, 1)]
    if placement == "attribute":
        attrs["app.payload"] = text
    elif placement == "io_attribute":
        attrs[draw(st.sampled_from(["gen_ai.tool.call.arguments", "input.value", "traceloop.entity.output",
                                    "tool_call.function.arguments", "gen_ai.input.messages"]))] = text
    elif placement == "array":
        attrs["app.args"] = ("first", text, "last")
    elif placement == "event":
        events.append(Event(draw(st.sampled_from(["gen_ai.tool.message", "gen_ai.choice", "exception"])),
                            {draw(st.sampled_from(["content", "message", "exception.message"])): text, "id": "e"}, 2))
    else:
        attrs[draw(st.sampled_from(["app.api_key", "db.password", "session.TOKEN"]))] = text
    return attrs, events, secret, sentinel, depth, placement


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(leaky_span(), st.booleans())
def test_a_secret_under_a_matching_key_never_leaves(span, drop_io):
    attrs, events, secret, sentinel, depth, placement = span
    redactor = Redactor(PATTERN, drop_io)
    out = dict(attrs)
    redactor.apply(out)
    out_events = redactor.events(events)
    assert not leaks(secret, out), serialised(out)[:3000]
    assert not leaks(secret, out_events), serialised(out_events)[:3000]
    assert out["gen_ai.tool.name"] == "search" and out["app.plain"] == "hello"
    assert out_events[0] is events[0]
    values = [v for v in [*out.values(), *(a for e in out_events for a in e.attributes.values())]
              if isinstance(v, str) and v.startswith('{"note"')]
    for value in values:  # the top level parsed: what is under non-matching keys is unchanged
        assert sentinel in value
    if sentinel and depth <= 100 and placement == "attribute":
        assert values, "a parseable value was masked whole"


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), filler)
clean_text = st.text(alphabet=st.characters(exclude_characters="ckwCKW0123456789\u212a", codec="utf-8"), max_size=40)
clean_json = st.recursive(json_scalars | clean_text,
                          lambda inner: st.lists(inner, max_size=4) | st.dictionaries(filler | clean_text, inner, max_size=4),
                          max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(filler, clean_json.map(json.dumps) | clean_text | st.tuples(clean_text, clean_text), max_size=6),
       st.dictionaries(filler, clean_text, max_size=3))
def test_nothing_matching_means_nothing_changes(attrs, event_attrs):
    out = dict(attrs)
    redactor = Redactor(PATTERN)
    redactor.apply(out)
    assert out.keys() == attrs.keys() and all(out[k] is attrs[k] for k in attrs)
    events = [Event("gen_ai.choice", event_attrs, 1)]
    assert redactor.events(events)[0] is events[0]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60), st.sampled_from(["\n", " ", "&", "; ", ", ", "?", "\t"]), plain_keys, secrets,
       st.sampled_from(["=", ": ", "="]), st.text(max_size=30))
def test_random_text_around_a_pair_never_leaks_nor_raises(before, sep, key, secret, assign, after):
    text = f"{before}{sep}{key}{assign}{secret}"
    attrs = {"app.text": text + ("\n" + after if after else ""), "app.tail": after}
    out = dict(attrs)
    Redactor(PATTERN).apply(out)
    assert not leaks(secret, out["app.text"]), out["app.text"]
    events = Redactor(PATTERN).events([Event("exception", {"exception.message": text}, 1)])
    assert not leaks(secret, events)


def test_the_documented_example_pattern_masks_secrets_and_keeps_token_counts():
    """docs/configuration.md and docs/processes.md give one example `redact_keys`: keys match as substrings, so it
    must mask secrets without turning the token counts of an LLM span into `[REDACTED]` strings."""
    from pathlib import Path

    from otel_agent_eval.core.redact import Redactor

    docs = Path(__file__).resolve().parent.parent / "docs"
    table = re.search(r"\(e\.g\. `([^`]+)`\)", (docs / "configuration.md").read_text()).group(1).replace("\\|", "|")
    inline = re.search(r'redact_keys=r"([^"]+)"', (docs / "processes.md").read_text()).group(1)
    assert table == inline
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": 3,
             "gen_ai.usage.cache_read.input_tokens": 2, "llm.token_count.total": 10, "llm.token_count.prompt": 7,
             "app.api_key": "sk-1", "x-api-key": "sk-2", "auth_token": "t", "db.password": "p", "client_secret": "s"}
    Redactor(table).apply(attrs)
    assert {k: v for k, v in attrs.items() if v == "[REDACTED]"}.keys() == {
        "app.api_key", "x-api-key", "auth_token", "db.password", "client_secret"}
    assert attrs["gen_ai.usage.input_tokens"] == 5 and attrs["llm.token_count.total"] == 10
