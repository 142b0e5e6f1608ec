"""`serve` intake against hostile input the QA pass found (issue numbers of /tmp/qa/serve.md).

OTLP/JSON spans with ids `int(x, 16)` would read wrongly (a sign) or strings the UTF-8 encoder cannot
write (lone surrogates), attribute values that are no AnyValue; gzip bodies of several members or with
trailing junk; idle connections at the HTTP connection limit; refusals of the HTTP layer itself. Each
is answered and counted, and every span accepted reaches the next hop.
"""
from __future__ import annotations

import gzip
import http.client
import json
import socket
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_receiver import HttpReceiver, running_receiver
from prometheus_client import CollectorRegistry
from serve_process import local_only

from otel_agent_eval.config.settings import Settings
from otel_agent_eval.otlp.json_spans import decode, spans_of_request
from otel_agent_eval.serve import ServeConfig, Service
from otel_agent_eval.serve.payload import PayloadError, TooLarge, decompressed

TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)


@pytest.fixture
def hop() -> Iterator[tuple[Service, HttpReceiver]]:
    with running_receiver("http") as receiver:
        svc = Service(ServeConfig(grpc_port=0, http_port=0, metrics_port=0, forward_delay_s=0.05, forward_to=receiver.endpoint),
                      settings=Settings(metrics_enabled=False), registry=CollectorRegistry()).start()
        try:
            yield svc, receiver
        finally:
            svc.stop()


def post(svc: Service, body: bytes, headers: dict[str, str] | None = None, path: str = "/v1/traces",
         method: str = "POST") -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(*svc.http.address, timeout=10)
    try:
        connection.request(method, path, body, {"Content-Type": "application/x-protobuf", **(headers or {})})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def raw_exchange(svc: Service, data: bytes) -> bytes:
    """What the receiver answers to these bytes, read until it closes."""
    with socket.create_connection(svc.http.address, timeout=10) as sock:
        sock.sendall(data)
        parts = []
        while chunk := sock.recv(65536):
            parts.append(chunk)
    return b"".join(parts)


def requests_counted(svc: Service, answer: str) -> float:
    return svc.registry.get_sample_value("agent_eval_serve_requests_total", {"transport": "http", "answer": answer}) or 0


def spans_counted(svc: Service, outcome: str) -> float:
    return svc.registry.get_sample_value("agent_eval_serve_spans_total", {"transport": "http", "outcome": outcome}) or 0


def json_span(i: int, **fields: Any) -> dict[str, Any]:
    return {"traceId": TRACE, "spanId": f"{i + 1:016x}", "name": f"step {i}", "startTimeUnixNano": "1700000000000000000",
            "endTimeUnixNano": "1700000000001000000", **fields}


def json_request(spans: list[dict[str, Any]], scope: str = "test") -> bytes:
    text = json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": scope}, "spans": spans}]}]})
    return text.encode()  # json.dumps escapes a lone surrogate as \\udXXX, as a hostile sender would


def protobuf_request(n: int) -> bytes:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for i in range(n):
        provider.get_tracer("t").start_span(f"step {i}").end()
    return encode_spans(memory.get_finished_spans()).SerializeToString()


# -- 1 and 6: OTLP/JSON spans the encoder would fail on ------------------------------------------------------

BAD_IDS = [("traceId", "-" + "1" * 31), ("traceId", "+" + "1" * 31), ("spanId", "-" + "1" * 15),
           ("spanId", "00_11111" + "1" * 8), ("parentSpanId", "-" + "1" * 15), ("traceId", "\u0661" * 32), ("traceId", "0x" + "1" * 30)]
BAD_VALUES = [[1, 2], 7, "x", {"stringvalue": "x"}, {"intValue": "99999999999999999999"}, {"intValue": str(-(1 << 63) - 1)},
              {"arrayValue": {"values": [{"stringValue": "a"}, "b", 3]}}, {"arrayValue": {"values": "ab"}},
              {"kvlistValue": {"values": [{"key": "k", "value": [1]}]}}]


@pytest.mark.parametrize(("field", "value"), BAD_IDS)
def test_a_json_id_that_is_not_plain_hex_or_base64_is_refused(field: str, value: str) -> None:
    spans, problems = spans_of_request(decode(json_request([json_span(0, **{field: value}), json_span(1)]))["resourceSpans"])
    assert [s.name for s in spans] == ["step 1"] and len(problems) == 1 and field in problems[0]


@pytest.mark.parametrize("value", BAD_VALUES, ids=repr)
def test_a_json_attribute_value_that_is_no_readable_anyvalue_refuses_its_span_with_why(value: Any) -> None:
    bad = json_span(0, attributes=[{"key": "app.ok", "value": {"stringValue": "fine"}}, {"key": "app.bad", "value": value}])
    spans, problems = spans_of_request(decode(json_request([bad, json_span(1)]))["resourceSpans"])
    assert [s.name for s in spans] == ["step 1"] and len(problems) == 1 and "app.bad" in problems[0], problems


def test_json_attribute_values_that_are_empty_or_at_the_int64_edges_are_kept() -> None:
    span = json_span(0, attributes=[{"key": "low", "value": {"intValue": str(-(1 << 63))}},
                                    {"key": "high", "value": {"intValue": str((1 << 63) - 1)}},
                                    {"key": "empty", "value": {}}, {"key": "none"}])
    (read,), problems = spans_of_request(decode(json_request([span]))["resourceSpans"])
    assert problems == [] and dict(read.attributes) == {"low": -(1 << 63), "high": (1 << 63) - 1}
    assert encode_spans([read]).SerializeToString()


def test_lone_surrogates_in_json_strings_are_mended_and_every_span_reaches_the_next_hop(
        hop: tuple[Service, HttpReceiver]) -> None:
    svc, receiver = hop
    good = protobuf_request(20)
    assert post(svc, good)[0] == 200
    hostile = [json_span(0, name="tool \ud800", status={"code": 2, "message": "bad \udc00"},
                         events=[{"name": "ev \udfff", "timeUnixNano": "1700000000000500000"}],
                         attributes=[{"key": "key \ud800", "value": {"stringValue": "value \ud801"}},
                                     {"key": "list", "value": {"arrayValue": {"values": [{"stringValue": "\ud802"}]}}}]),
               json_span(1, traceId="-" + "1" * 31),
               json_span(2, attributes=[{"key": "app.big", "value": {"intValue": "99999999999999999999"}}]),
               json_span(3)]
    status, _, reply = post(svc, json_request(hostile, scope="scope \ud800"), {"Content-Type": "application/json"})
    answer = json.loads(reply)
    assert status == 200 and answer["partialSuccess"]["rejectedSpans"] == "2", answer
    assert "traceId" in answer["partialSuccess"]["errorMessage"]
    assert svc.drain()
    spans = receiver.wait_for_spans(22)
    assert len(spans) == 22
    mended = next(s for s in spans if s["name"].startswith("tool"))
    assert mended["name"] == "tool \ufffd" and mended["scope"] == "scope \ufffd"
    assert mended["attributes"] == {"key \ufffd": "value \ufffd", "list": ["\ufffd"]} | {
        k: v for k, v in mended["attributes"].items() if k.startswith(("agent_eval", "gen_ai"))}
    assert [e["name"] for e in mended["events"]][:1] == ["ev \ufffd"]
    assert spans_counted(svc, "accepted") == 22 and spans_counted(svc, "invalid") == 2
    assert svc.registry.get_sample_value("agent_eval_serve_forwarded_spans_total", {"outcome": "failed"}) in (None, 0)


# -- 5: gzip members and trailing junk -----------------------------------------------------------------------

def test_a_gzip_body_of_several_members_is_read_whole_within_the_limit() -> None:
    assert decompressed(gzip.compress(b"abc") + gzip.compress(b"def"), "gzip") == b"abcdef"
    with pytest.raises(TooLarge):
        decompressed(gzip.compress(b"a" * 600) + gzip.compress(b"b" * 600), "gzip", limit=1000)
    with pytest.raises(PayloadError, match="truncated"):
        decompressed(gzip.compress(b"abc") + gzip.compress(b"def")[:-4], "gzip")


@pytest.mark.parametrize(("encoding", "body"), [("gzip", gzip.compress(b"abc") + b"junk"),
                                                ("deflate", zlib.compress(b"abc") + b"junk"),
                                                ("deflate", zlib.compress(b"abc") + zlib.compress(b"def"))])
def test_trailing_data_after_the_compressed_body_is_refused(encoding: str, body: bytes) -> None:
    with pytest.raises(PayloadError, match="trailing data") as refused:
        decompressed(body, encoding)
    assert not isinstance(refused.value, TooLarge)


def test_gzip_members_over_http_all_arrive_and_trailing_junk_is_a_400(hop: tuple[Service, HttpReceiver]) -> None:
    svc, receiver = hop
    body = gzip.compress(protobuf_request(5)) + gzip.compress(protobuf_request(5))
    assert post(svc, body, {"Content-Encoding": "gzip"})[0] == 200
    status, _, reply = post(svc, gzip.compress(protobuf_request(5)) + b"\x00junk", {"Content-Encoding": "gzip"})
    assert status == 400 and "trailing data" in status_pb2.Status.FromString(reply).message
    assert svc.drain()
    assert len(receiver.wait_for_spans(10)) == 10
    assert spans_counted(svc, "accepted") == 10 and requests_counted(svc, "invalid") == 1


# -- 4: idle connections at the limit ------------------------------------------------------------------------

def test_idle_connections_at_the_limit_make_room_for_senders() -> None:
    """(A 503 when every connection is mid-request: test_serve.py's busy test.)"""
    from otel_agent_eval.serve.http_receiver import HttpReceiver as Receiver
    svc = Service(ServeConfig(grpc_port=0, http_port=0, metrics_port=0, forward_delay_s=0.05),
                  settings=Settings(metrics_enabled=False), registry=CollectorRegistry()).start()
    receiver = Receiver(svc.receiving, port=0, max_connections=2, idle_timeout_s=30).start()
    body = protobuf_request(1)
    senders = []
    try:
        idle = [socket.create_connection(receiver.address) for _ in range(2)]  # send nothing, as in the QA's 64
        trickling = socket.create_connection(receiver.address)  # closes the first idle one to get in
        trickling.sendall(b"POST /v1/traces HTTP/1.1\r\n")  # headers never finished
        for _ in range(2):  # each sender, kept alive (its slot stays taken), closes the one waiting longest
            connection = http.client.HTTPConnection(*receiver.address, timeout=10)
            connection.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
            response = connection.getresponse()
            assert response.status == 200
            response.read()
            senders.append(connection)
        for sock in (*idle, trickling):  # closed by the receiver: the end of the stream (or a reset)
            sock.settimeout(10)
            try:
                assert sock.recv(1) == b""
            except ConnectionResetError:
                pass
            sock.close()
        assert requests_counted(svc, "busy") == 0 and spans_counted(svc, "accepted") == 2
    finally:
        for connection in senders:
            connection.close()
        receiver.stop()
        svc.stop()


# -- 10: the HTTP layer's own refusals -----------------------------------------------------------------------

def test_every_http_refusal_is_one_line_of_reason_and_counted(hop: tuple[Service, HttpReceiver]) -> None:
    svc, _ = hop
    status, headers, reply = post(svc, b"", path="/v1/trace")
    assert status == 404 and headers["Content-Type"] == "application/x-protobuf"
    assert "/v1/traces" in status_pb2.Status.FromString(reply).message
    status, headers, reply = post(svc, b"{}", {"Content-Type": "application/json"}, path="/v1/trace")
    assert status == 404 and "/v1/traces" in json.loads(reply)["message"]
    status, headers, reply = post(svc, b"", {"Content-Type": ""}, method="GET")
    assert status == 405 and headers["Content-Type"].startswith("text/plain") and reply.count(b"\n") == 1
    status, _, reply = post(svc, b"", method="PUT")
    assert status == 501 and status_pb2.Status.FromString(reply).code == 12
    answer = raw_exchange(svc, b"garbage\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ") and answer.endswith(b"\n") and answer.split(b"\r\n\r\n", 1)[1].count(b"\n") == 1
    answer = raw_exchange(svc, b"POST /v1/traces HTTP/1.1\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 431 ") and b"<html" not in answer.lower()
    answer = raw_exchange(svc, b"POST /v1/traces HTTP/1.1\r\nContent-Type: application/x-protobuf\r\n"
                               b"Transfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFFFF\r\n")
    reason = status_pb2.Status.FromString(answer.split(b"\r\n\r\n", 1)[1]).message
    assert answer.startswith(b"HTTP/1.1 413 ") and reason == "chunked request body is over the limit of 4,194,304 bytes"
    status, _, reply = post(svc, b"", {"Content-Length": "x"})
    assert status == 411 and status_pb2.Status.FromString(reply).message.startswith("no valid Content-Length")
    assert (requests_counted(svc, "wrong_path"), requests_counted(svc, "wrong_method"), requests_counted(svc, "invalid"),
            requests_counted(svc, "too_large")) == (2, 2, 2, 2)
