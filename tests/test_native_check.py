"""The one parse of a request in `serve` (native/src/check.rs): bytes the native checker accepts are exactly the
bytes upb's parse accepts, with the same span count, and the native reader reads them into the same spans.

Valid requests of every shape (the native reader's generated ones, the noise traces as SDKs write them) and many
mutations of them: byte flips, truncations at every offset, unknown fields of every wire type inserted into any
message (groups nested, known field numbers with another wire type), invalid UTF-8 in every kind of string,
malformed tags, varints and lengths, and nesting on both sides of upb's depth limit. Where the checker refuses,
upb parses for its words, so a refused request reads the same either way (`payload.read_request`).
"""
from __future__ import annotations

import random
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from test_native_reader import described, requests

from noise_traces import traces
from otel_agent_eval.otlp import proto_spans
from otel_agent_eval.otlp.json_spans import SpanProblem
from otel_agent_eval.otlp.messages import _varint as varint
from otel_agent_eval.serve import payload
from otel_agent_eval.serve.payload import PROTOBUF, PayloadError, read_request

pytestmark = pytest.mark.skipif(proto_spans._counter is None, reason="the native checker is not built (or protobuf is not upb)")

ROOT = ExportTraceServiceRequest.DESCRIPTOR


# -- the property -------------------------------------------------------------------------------------------------

def upb(data: bytes) -> Any:
    try:
        return proto_spans.parsed(data)
    except SpanProblem:
        return None


def agree(data: bytes, exact: bool = False) -> bool:
    """Native accepts iff upb accepts; when both do, the same count and the same spans (kept or not). True: accepted.

    A kept span's message is its bytes as they came, which are the bytes upb writes back for a canonical encoding
    (`exact`); in a mutated one an unknown field stays where it came, where upb writes it last: the same message."""
    count, message = proto_spans.checked(data), upb(data)
    assert (count is not None) == (message is not None), (count, data.hex())
    if message is None:
        return False
    assert count == proto_spans.span_count(message)
    with patch.object(sdk_trace, "time_ns", lambda: 1):  # an event without a time gets the reading's
        for keep in (False, True):
            native = proto_spans.spans_of_request(None, keep=keep, data=data)  # no upb parse, unless handed back
            python = proto_spans.spans_of_request(message, keep=keep)
            assert [comparable(s, exact) for s in native[0]] == [comparable(s, exact) for s in python[0]]
            assert list(native[1]) == list(python[1])
    return True


def comparable(span: Any, exact: bool) -> Any:
    out = described(span)
    if "_message" in span.__dict__ and not exact:  # the message, its resource and its scope, as upb writes them
        resource, scope = out[-2], out[-1]
        out[-3] = Span.FromString(out[-3]).SerializeToString()
        out[-2] = (Resource.FromString(resource[0]).SerializeToString(), resource[1])
        out[-1] = (None if scope[0] is None else InstrumentationScope.FromString(scope[0]).SerializeToString(), scope[1])
    return out


# -- the wire format as a tree, to mutate and write back ------------------------------------------------------------

class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def varint(self) -> int:
        out = shift = 0
        while True:
            byte = self.data[self.at]
            self.at += 1
            out |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return out


def tree(data: bytes, descriptor: Any) -> list[list[Any]]:
    """A valid message as [number, wire type, value]; a known message field's value is its tree, with its descriptor."""
    out: list[list[Any]] = []
    r = Reader(data)
    while r.at < len(data):
        tag = r.varint()
        number, wt = tag >> 3, tag & 7
        field = descriptor.fields_by_number.get(number) if descriptor is not None else None
        if wt == 0:
            value: Any = r.varint()
        elif wt in (1, 5):
            size = 8 if wt == 1 else 4
            value, r.at = data[r.at:r.at + size], r.at + size
        else:
            size = r.varint()
            value, r.at = data[r.at:r.at + size], r.at + size
            if field is not None and field.message_type is not None:
                value = (tree(value, field.message_type), field.message_type)
        out.append([number, wt, value])
    return out


def written(nodes: list[list[Any]]) -> bytes:
    out = bytearray()
    for number, wt, value in nodes:
        if wt == "raw":  # bytes written as they are (a malformed field, a group)
            out += value
            continue
        out += varint(number << 3 | wt)
        if wt == 0:
            out += varint(value)
        elif wt in (1, 5):
            out += value
        else:
            body = written(value[0]) if isinstance(value, tuple) else value
            out += varint(len(body)) + body
    return bytes(out)


def messages(nodes: list[list[Any]], descriptor: Any) -> list[tuple[list[list[Any]], Any]]:
    """Every message in the tree (the root included), with its descriptor."""
    out = [(nodes, descriptor)]
    for _, _, value in nodes:
        if isinstance(value, tuple):
            out += messages(*value)
    return out


def strings(nodes: list[list[Any]], descriptor: Any) -> list[list[Any]]:
    """Every node that is a `string` field of its message."""
    out = []
    for node_list, d in messages(nodes, descriptor):
        for node in node_list:
            field = d.fields_by_number.get(node[0])
            if field is not None and field.type == field.TYPE_STRING and node[1] == 2:
                out.append(node)
    return out


BAD_UTF8 = [b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"a\xe2\x82", b"\x80", b"\xf8\x88\x80\x80\x80"]
GOOD_UTF8 = ["ü".encode(), "\U0010ffff".encode(), "\ud7ff".encode(), "\ue000".encode()]


def unknown_field(rng: random.Random, number: int, depth: int = 0) -> list[Any]:
    """A well-formed field of any wire type under `number` (a group holding more fields, groups nested)."""
    wt = rng.choice([0, 1, 2, 3, 5])
    if wt == 0:
        return [number, 0, rng.choice([0, 1, 300, 2**63, 2**64 - 1])]
    if wt == 1:
        return [number, 1, rng.randbytes(8)]
    if wt == 5:
        return [number, 5, rng.randbytes(4)]
    if wt == 2:
        return [number, 2, rng.choice([b"", b"\xff\xfe", rng.randbytes(rng.randrange(6))])]
    inner = [unknown_field(rng, rng.randrange(1, 40), depth + 1) for _ in range(rng.randrange(3))] if depth < 3 else []
    return [number, "raw", varint(number << 3 | 3) + written(inner) + varint(number << 3 | 4)]


def mutated(data: bytes, rng: random.Random) -> bytes:
    """One structural mutation of a valid request (the lengths around it written anew), then maybe a raw one."""
    root = tree(data, ROOT)
    targets = messages(root, ROOT)
    nodes, descriptor = rng.choice(targets)
    choice = rng.randrange(9)
    if choice == 0:  # an unknown field, of any wire type
        nodes.insert(rng.randrange(len(nodes) + 1), unknown_field(rng, rng.choice([17, 99, 1000, 2**29 - 1])))
    elif choice == 1 and descriptor.fields:  # a known field number with another wire type
        nodes.insert(rng.randrange(len(nodes) + 1), unknown_field(rng, rng.choice(descriptor.fields).number))
    elif choice == 2:  # invalid (or valid, unusual) UTF-8 in a string
        found = strings(root, ROOT)
        if found:
            node = rng.choice(found)
            node[2] = node[2][:rng.randrange(len(node[2]) + 1)] + rng.choice(BAD_UTF8 + GOOD_UTF8)
    elif choice == 3:  # invalid UTF-8 in a bytes field or an unknown one: not checked
        nodes.append([rng.choice([1, 2, 4, 17]) if descriptor.name == "Span" else 77, 2, rng.choice(BAD_UTF8)])
    elif choice == 4:  # a malformed field
        nodes.insert(rng.randrange(len(nodes) + 1), [0, "raw", rng.choice(MALFORMED)])
    elif choice == 5:  # a message field written twice, or empty
        known = [n for n in nodes if isinstance(n[2], tuple)]
        if known:
            nodes.append(list(rng.choice(known)))
    elif choice == 6:  # a stray or mismatched end-group, a group left open
        nodes.insert(rng.randrange(len(nodes) + 1), [0, "raw", rng.choice([b"\x0c", b"\x8c\x01", b"\x0b", b"\x0b\x14",
                                                                            b"\x0b\x08\x01\x14", b"\x03", b"\x04"])])
    elif choice == 7:  # a field number 0, or one past 2**29 - 1
        nodes.insert(rng.randrange(len(nodes) + 1), [0, "raw", rng.choice([b"\x00\x00", b"\x02\x00", b"\xf8\xff\xff\xff\x0f\x00",
                                                                            b"\x80\x80\x80\x80\x10\x00"])])
    out = written(root)
    if rng.random() < 0.3 and out:  # and a raw one: a byte changed, or a cut
        at = rng.randrange(len(out))
        if rng.random() < 0.5:
            out = out[:at] + bytes([out[at] ^ (1 << rng.randrange(8))]) + out[at + 1:]
        else:
            out = out[:at]
    return out


MALFORMED = [
    b"\x0e", b"\x0f", b"\x0e\x00", b"\x0f\x00\x00\x00\x00",  # wire types 6 and 7
    b"\x88\x80\x80\x80\x80\x00\x00",  # a 6-byte tag
    b"\x88\x80\x80\x80\x00\x00",  # a 5-byte tag (valid)
    b"\x88\x80\x80\x80\x10\x00",  # a 5-byte tag over 32 bits
    b"\x08" + b"\xff" * 9 + b"\x01",  # a 10-byte varint (valid)
    b"\x08" + b"\xff" * 9 + b"\x7f",  # a 10-byte varint, its high bits beyond 64 (upb ignores them)
    b"\x08" + b"\xff" * 10 + b"\x01",  # an 11-byte varint
    b"\x0a\x85\x80\x80\x80\x80\x80\x80\x80\x80\x00abcde",  # a length as a 10-byte varint
    b"\x0a\xff\xff\xff\xff\x07",  # a length of 2**31 - 1
    b"\x0a\xff\xff\xff\xff\x0f",  # a length over 2**31
    b"\x0a\x7f",  # a length past the end
    b"\x09\x01\x02\x03", b"\x0d\x01",  # fixed values cut short
]


# -- deep nesting --------------------------------------------------------------------------------------------------

def nested_request(levels: int, kind: str) -> bytes:
    """One span whose attribute is `levels` arrays or kvlists deep, or holds an unknown group `levels` deep."""
    if kind == "group":
        value = b""
        for _ in range(levels):
            value = b"\x8b\x01" + value + b"\x8c\x01"  # group 17
        any_value = value
    else:
        any_value = b"\x0a\x01x"  # string_value "x"
        for _ in range(levels):
            inner = b"\x0a" + varint(len(any_value)) + any_value  # ArrayValue.values / KeyValueList.values(KeyValue.key..)
            if kind == "kvlist":
                kv = b"\x0a\x01k\x12" + varint(len(any_value)) + any_value
                inner = b"\x0a" + varint(len(kv)) + kv
                any_value = b"\x32" + varint(len(inner)) + inner
            else:
                any_value = b"\x2a" + varint(len(inner)) + inner
    kv = b"\x0a\x01a\x12" + varint(len(any_value)) + any_value
    span = b"\x0a\x10" + b"\x01" * 16 + b"\x12\x08" + b"\x02" * 8 + b"\x2a\x01s\x4a" + varint(len(kv)) + kv
    scope = b"\x12" + varint(len(span)) + span
    resource = b"\x12" + varint(len(scope)) + scope
    return b"\x0a" + varint(len(resource)) + resource


@pytest.mark.parametrize("kind", ["array", "kvlist", "group"])
def test_nesting_is_refused_where_upb_refuses_it(kind: str) -> None:
    outcomes = [agree(nested_request(levels, kind)) for levels in range(1, 110)]
    assert outcomes[0] and not outcomes[-1]  # both sides of the limit are seen
    assert outcomes == sorted(outcomes, reverse=True)


# -- valid requests and their mutations -------------------------------------------------------------------------

def sdk_requests(seed: int) -> list[bytes]:
    spans = [span for starting, span, _ in traces(seed, count=3) if not starting]
    return [encode_spans(spans).SerializeToString(), encode_spans(spans[:3]).SerializeToString()]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(requests())
def test_generated_requests_are_accepted_and_read_alike(data: bytes) -> None:
    assert agree(data, exact=True)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(requests(), st.randoms(use_true_random=False))
def test_mutated_requests_are_refused_where_upb_refuses_them(data: bytes, rng: random.Random) -> None:
    for _ in range(4):
        data = mutated(data, rng)
        agree(data)
        if upb(data) is None:
            return


@pytest.mark.parametrize("seed", range(6))
def test_sdk_requests_and_their_mutations(seed: int) -> None:
    rng = random.Random(seed)
    for data in sdk_requests(seed):
        assert agree(data, exact=True)
        accepted = 0
        for _ in range(150):
            accepted += agree(mutated(data, rng))
        assert 0 < accepted < 150  # both outcomes were tried


def test_every_cut_and_every_byte_changed_of_a_small_request() -> None:
    data = sdk_requests(7)[1]
    assert len(data) < 2000
    for at in range(len(data)):
        agree(data[:at])
        for bit in (0, 3, 7):
            agree(data[:at] + bytes([data[at] ^ (1 << bit)]) + data[at + 1:])
        agree(data[:at] + b"\x80" + data[at:])


@pytest.mark.parametrize("field", MALFORMED)
def test_malformed_fields_at_the_top_and_inside_a_span(field: bytes) -> None:
    data = sdk_requests(8)[1]
    agree(field + data)
    agree(data + field)
    root = tree(data, ROOT)
    span = messages(root, ROOT)[-1][0]
    span.append([0, "raw", field])
    agree(written(root))


def test_a_refused_request_reads_as_upb_words_it() -> None:
    data = sdk_requests(9)[1][:-3]
    assert proto_spans.checked(data) is None
    with pytest.raises(PayloadError) as refused:
        read_request(data, PROTOBUF)
    with pytest.raises(SpanProblem) as upb_words:
        proto_spans.parsed(data)
    assert str(refused.value) == str(upb_words.value)


def test_an_accepted_request_is_not_parsed_by_upb(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_upb(data: bytes) -> Any:
        raise AssertionError("parsed by upb")

    monkeypatch.setattr(proto_spans, "parsed", no_upb)
    monkeypatch.setattr(payload, "parsed", no_upb)
    data = sdk_requests(10)[0]
    request = read_request(data, PROTOBUF, keep=True)
    spans, problems = request.spans()
    assert request.count == len(spans) > 0 and problems == []
