"""Generated agent traces that mix every kind of span that can matter with noise (core/noise.py), as real SDK spans.

`traces(seed)` returns the calls a `TracerProvider` makes to its span processors while the traces run, in order
(`(True, span, parent context)` as a span starts, `(False, finished span, None)` as it ends), so a test can replay
the very same calls into two processors. Spans get explicit times and end in time order, so a child may end after
its parent (a noise span that outlives its tool), as in async code.

What a trace may hold: an agent root, or a noise root (an HTTP server span, a local root) above agents or loose
tool calls, or a root under a remote parent; chat spans with and without tokens, with 0-3 HTTP/DB leaves;
tool spans with leaves, some with an ERROR child under an UNSET tool, some failed themselves; a model call
nested through a noise span (`call_llm` > noise > `chat`, google-adk's shape); an untyped span named
`invoke_agent <name>` (a run announced by its name); ERROR noise leaves; a nested sub-agent.
"""
from __future__ import annotations

import json
import random
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, set_span_in_context

AGENTS = ("support_agent", "math_agent", "analytics_agent")
TOOLS = {"web_search": {"query": "return policy"}, "local_index": {"query": "returns"},
         "basic_calculator": {"expression": "2 * 3"}, "simple_filter": {"predicate": "x > 1"}}
MODEL = "gpt-4o-mini"
MS = 1_000_000


class Recorder(SpanProcessor):
    def __init__(self) -> None:
        self.calls: list[tuple[bool, Any, Context | None]] = []

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.calls.append((True, span, parent_context))

    def on_end(self, span: ReadableSpan) -> None:
        self.calls.append((False, span, None))


class _Node:
    def __init__(self, name: str, attributes: dict[str, Any], kind: SpanKind = SpanKind.INTERNAL,
                 error: str | None = None) -> None:
        self.name, self.attributes, self.kind, self.error = name, attributes, kind, error
        self.children: list[_Node] = []
        self.start = self.end = 0
        self.late = False  # ends after its parent


def _noise(rng: random.Random, error: bool = False) -> _Node:
    if rng.random() < 0.5:
        status = 503 if error else 200
        return _Node("GET", {"http.request.method": "GET", "url.full": f"https://api.example.com/v1/{rng.randrange(99)}",
                             "server.address": "api.example.com", "http.response.status_code": status},
                     SpanKind.CLIENT, "503" if error else None)
    return _Node("SELECT orders", {"db.system": "postgresql", "db.query.text": "SELECT * FROM orders WHERE id = $1",
                                   "db.namespace": "shop"}, SpanKind.CLIENT, "DatabaseError" if error else None)


def _leaves(rng: random.Random, node: _Node) -> _Node:
    for _ in range(rng.randrange(4)):
        leaf = _noise(rng, error=rng.random() < 0.05)
        leaf.late = rng.random() < 0.1
        node.children.append(leaf)
    return node


def _chat(rng: random.Random, tokens: bool = True) -> _Node:
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL}
    if tokens:
        attributes.update({"gen_ai.usage.input_tokens": rng.randint(10, 900), "gen_ai.usage.output_tokens": rng.randint(1, 90)})
    return _leaves(rng, _Node(f"chat {MODEL}", attributes, SpanKind.CLIENT))


def _tool(rng: random.Random) -> _Node:
    name = rng.choice(list(TOOLS))
    failed = rng.random() < 0.15
    node = _Node(f"execute_tool {name}", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                                          "gen_ai.tool.call.arguments": json.dumps(TOOLS[name])},
                 error="ToolError" if failed else None)
    _leaves(rng, node)
    if not failed and rng.random() < 0.25:  # an ERROR child under an UNSET tool: the call failed
        node.children.append(_noise(rng, error=True))
    return node


def _nested_llm(rng: random.Random) -> _Node:
    """google-adk's shape: a model call on nested spans through noise spans (`call_llm` > `generate_content` >
    [`client.request`] > `chat`); its tokens are counted once."""
    outer = _Node("call_llm", {"gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL,
                               "gen_ai.usage.input_tokens": 500, "gen_ai.usage.output_tokens": 50})
    middle = _Node("generate_content", {"framework.step": "generate"})
    outer.children.append(middle)
    if rng.random() < 0.5:  # two noise spans between the model-call spans
        deeper = _Node("client.request", {"rpc.system": "grpc"})
        middle.children.append(deeper)
        middle = deeper
    middle.children.append(_chat(rng))
    if rng.random() < 0.5:
        outer.children.append(_noise(rng))
    return outer


def _agent_body(rng: random.Random, node: _Node, depth: int) -> _Node:
    node.children.append(_chat(rng, tokens=rng.random() < 0.9))
    for _ in range(rng.randrange(1, 4)):
        pick = rng.random()
        if pick < 0.5:
            node.children.append(_tool(rng))
        elif pick < 0.65:
            node.children.append(_nested_llm(rng))
        elif pick < 0.75:
            node.children.append(_noise(rng, error=rng.random() < 0.3))
        elif pick < 0.85 and depth < 2:
            node.children.append(_agent(rng, depth + 1))
        elif pick < 0.93:  # a run announced by its name only (an untyped `invoke_agent <name>` span)
            named = _Node(f"invoke_agent {rng.choice(AGENTS)}", {"framework": "custom"})
            named.children.append(_tool(rng))
            node.children.append(named)
        else:
            node.children.append(_chat(rng))
    node.children.append(_chat(rng))
    return node


def _agent(rng: random.Random, depth: int = 0) -> _Node:
    agent = rng.choice(AGENTS)
    return _agent_body(rng, _Node(f"invoke_agent {agent}", {"gen_ai.operation.name": "invoke_agent",
                                                            "gen_ai.agent.name": agent}), depth)


def _trace(rng: random.Random) -> tuple[_Node, bool]:
    """A trace's root, and whether it sits under a remote parent."""
    pick = rng.random()
    if pick < 0.45:
        return _agent(rng), rng.random() < 0.2
    server = _Node("POST /chat", {"http.request.method": "POST", "url.path": "/chat", "http.route": "/chat"},
                   SpanKind.SERVER, "500" if rng.random() < 0.1 else None)
    if pick < 0.8:
        server.children.append(_agent(rng))
    else:  # loose calls: a trace run rooted at a noise span
        for _ in range(rng.randrange(1, 4)):
            server.children.append(_tool(rng) if rng.random() < 0.6 else _chat(rng))
    _leaves(rng, server)
    return server, rng.random() < 0.3


def _timed(rng: random.Random, node: _Node, start: int) -> int:
    """Give the subtree times from `start`; returns its end. Children run one after another inside their parent."""
    node.start = t = start + rng.randrange(1, 3) * MS
    late_ends = []
    for child in node.children:
        t = _timed(rng, child, t) + rng.randrange(0, 2) * MS
        if child.late:
            late_ends.append(child)
    node.end = t + rng.randrange(1, 4) * MS
    for child in late_ends:  # a noise leaf that outlives its parent (async), ending within a few ms after it
        child.end = node.end + rng.randrange(1, 5) * MS
    return max([node.end] + [child.end for child in node.children])


def _events(node: _Node, parent: _Node | None, out: list[tuple[int, int, int, _Node, _Node | None]]) -> None:
    out.append((node.start, 1, len(out), node, parent))
    out.append((node.end, 0, len(out), node, parent))
    for child in node.children:
        _events(child, node, out)


def traces(seed: int, count: int = 4) -> list[tuple[bool, Any, Context | None]]:
    """`count` traces of generated shapes (`seed` decides them), run one after another on a real TracerProvider."""
    rng = random.Random(seed)
    recorder = Recorder()
    provider = TracerProvider(resource=Resource({"service.name": "noise-test"}), shutdown_on_exit=False)
    provider.add_span_processor(recorder)
    tracer = provider.get_tracer("noise-test")
    t = 1_700_000_000_000_000_000
    for _ in range(count):
        root, remote = _trace(rng)
        t = _timed(rng, root, t) + 10 * MS
        events: list[tuple[int, int, int, _Node, _Node | None]] = []
        _events(root, None, events)
        events.sort(key=lambda e: (e[0], e[1] == 1, e[2]))  # ends before starts at one instant
        base = (set_span_in_context(NonRecordingSpan(SpanContext(rng.getrandbits(128) or 1, rng.getrandbits(64) or 1,
                                                                 is_remote=True, trace_flags=TraceFlags(1))))
                if remote else None)
        live: dict[int, Span] = {}
        for time_ns, starting, _, node, parent in events:
            if starting:
                context = set_span_in_context(live[id(parent)]) if parent is not None else base
                live[id(node)] = tracer.start_span(node.name, context=context, kind=node.kind, start_time=time_ns,
                                                   attributes=node.attributes)
            else:
                span = live[id(node)]
                if node.error is not None:
                    span.set_status(Status(StatusCode.ERROR, node.error))
                span.end(end_time=time_ns)
    return recorder.calls
