"""A scripted OpenAI-compatible judge on localhost: `/v1/chat/completions`, no key, no network.

deepeval's real model client (`OpenAIModel` with a `base_url`) talks to it over HTTP. Each reply is
chosen by the prompt deepeval sent (`Judge.by_prompt`): a tool-selection prompt gets
`{"score": ..., "reason": ...}`, an argument-verdicts prompt one `yes` verdict per tool call, a
reason prompt `{"reason": ...}`. Replies can also be queued (`Judge.queue`), each one a `Reply`:
JSON content, a status (429, 500), text that is no JSON (`GARBAGE`), or a hang (held until
`release()` or the server closes). Every request is recorded (`requests`: body and headers), so a
test can assert what the prompt held. The tests run it (`tests/judge_server.py`), and so does the bench's
judge section (`judge.py`).

    >>> with JudgeServer() as server:
    ...     server.selection = (0.25, "WebSearch was not needed")
    ...     model = judge_model("gpt-4o-mini", base_url=server.base_url)
"""
from __future__ import annotations

import json
import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GARBAGE = "I am not JSON at all {"
SELECTION_MARK = "Tool Selection"  # in deepeval's tool-selection prompt
VERDICTS_MARK = "'verdicts' key"  # in deepeval's argument-correctness verdicts prompt


@dataclass
class Reply:
    """One scripted answer: `content` (a dict is sent as JSON), or an HTTP `status` error, or a hang."""

    content: Any = None
    status: int = 200
    hang: bool = False
    usage: tuple[int, int] | None = None  # (prompt, completion) tokens; None: counted from the texts' words


@dataclass
class Recorded:
    body: dict[str, Any]
    headers: dict[str, str]
    path: str

    @property
    def prompt(self) -> str:
        """The text of the request's messages, joined."""
        texts = []
        for message in self.body.get("messages", []):
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts.extend(part.get("text", "") for part in content if isinstance(part, dict))
        return "\n".join(texts)


@dataclass
class JudgeServer:
    """The server; `selection` is the (score, reason) a tool-selection prompt gets by default."""

    selection: tuple[float, str] = (1.0, "The tools chosen fit the task.")
    respond: Callable[[str], Reply | None] | None = None  # consulted first with each prompt; None: `by_prompt`
    argument_verdict: str = "yes"
    argument_reason: str = "The arguments address the input."
    requests: list[Recorded] = field(default_factory=list)
    _queue: deque[Reply] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _released: threading.Event = field(default_factory=threading.Event)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> JudgeServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"unparsed": raw.decode("utf-8", "replace")}
                recorded = Recorded(body, {k.lower(): v for k, v in self.headers.items()}, self.path)
                with server._lock:
                    server.requests.append(recorded)
                    reply = server._queue.popleft() if server._queue else None
                if reply is None and server.respond is not None:
                    reply = server.respond(recorded.prompt)
                if reply is None:
                    reply = server.by_prompt(recorded.prompt)
                if reply.hang:
                    server._released.wait()
                    try:
                        self.send_error(503)
                    except OSError:
                        pass
                    return
                if reply.status != 200:
                    self._send(reply.status, {"error": {"message": f"scripted {reply.status}", "type": "scripted",
                                                        "code": str(reply.status)}})
                    return
                content = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
                prompt_tokens, completion_tokens = reply.usage or (len(recorded.prompt.split()), len(content.split()))
                self._send(200, {
                    "id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "scripted"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                              "total_tokens": prompt_tokens + completion_tokens},
                })

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="judge-server", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.release()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    # -- script --------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start the server first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def queue(self, *replies: Reply) -> None:
        """Answer the next requests with these, in order (then by prompt again). A hang queued after `release()`
        hangs again (until the next `release()` or `close()`)."""
        with self._lock:
            if any(reply.hang for reply in replies) and self._server is not None:
                self._released.clear()
            self._queue.extend(replies)

    def release(self) -> None:
        """Let every hanging request go (each answers 503)."""
        self._released.set()

    def by_prompt(self, prompt: str) -> Reply:
        """The default answer for a deepeval prompt."""
        if VERDICTS_MARK in prompt:
            calls = prompt.rsplit("Tool Calls:", 1)[-1]
            count = max(1, len(re.findall(r"ToolCall\(", calls)))
            verdict: dict[str, Any] = {"verdict": self.argument_verdict}
            if self.argument_verdict == "no":
                verdict["reason"] = self.argument_reason
            return Reply({"verdicts": [dict(verdict) for _ in range(count)]})
        if SELECTION_MARK in prompt:
            score, reason = self.selection
            return Reply({"score": score, "reason": reason})
        return Reply({"reason": self.argument_reason})

    def prompts(self, mark: str = SELECTION_MARK) -> list[str]:
        """The prompts received that contain `mark` (the tool-selection ones by default)."""
        with self._lock:
            return [r.prompt for r in self.requests if mark in r.prompt]
