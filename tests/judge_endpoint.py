"""A local judge endpoint that the online tests script: it answers, hangs, answers garbage, 429s or 500s.

`HttpJudge` posts each request to it over real HTTP (no client timeout: the online judge's own timeout is
what bounds a hang) and reads `{"score", "reason", "input_tokens", "output_tokens"}` back as a `JudgeResult`.
A stand-in for deepeval's judge where the tests are about the worker around the judge, not the judge.
"""
from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from otel_agent_eval.judge.result import PART_JUDGE, JudgeResult


class Endpoint:
    """`mode`: ok, hang (until `release` is set), garbage, 429, 500. Requests are kept (their JSON bodies)."""

    def __init__(self, mode: str = "ok", score: float = 0.75) -> None:
        self.mode = mode
        self.score = score
        self.release = threading.Event()
        self.requests: list[dict[str, Any]] = []
        self.hanging = 0
        self._lock = threading.Condition()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with endpoint._lock:
                    endpoint.requests.append(body)
                mode = endpoint.mode
                if mode == "hang":
                    with endpoint._lock:
                        endpoint.hanging += 1
                        endpoint._lock.notify_all()
                    endpoint.release.wait(60)
                    with endpoint._lock:
                        endpoint.hanging -= 1
                if mode in ("429", "500"):
                    self.send_response(int(mode))
                    self.end_headers()
                    return
                payload = (b"<html>not json" if mode == "garbage" else json.dumps(
                    {"score": endpoint.score, "reason": f"tools fit the task {body['task']}", "input_tokens": 120,
                     "output_tokens": 30}).encode())
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d/judge" % self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def wait_hanging(self, n: int, timeout_s: float = 30.0) -> bool:
        """Wait until `n` requests are held (mode hang)."""
        with self._lock:
            return self._lock.wait_for(lambda: self.hanging >= n, timeout_s)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


class HttpJudge:
    """A `Judge` over HTTP to an `Endpoint`; raises on an HTTP error or an answer that is no JSON result."""

    def __init__(self, url: str, *, cost_per_token: float | None = 1e-5, sample_rate: float = 1.0) -> None:
        self.url = url
        self.cost_per_token = cost_per_token
        self.sample_rate = sample_rate

    def judge(self, request: Any) -> JudgeResult:
        body = json.dumps({"trace_id": f"{request.trace_id:032x}", "agent": request.agent, "task": request.task,
                           "input": request.input, "tools_called": [t.name for t in request.tools_called],
                           "available_tools": [t.name for t in request.available_tools]}).encode()
        with urllib.request.urlopen(urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})) as response:
            answer = json.loads(response.read())
        tokens = answer["input_tokens"] + answer["output_tokens"]
        return JudgeResult(score=float(answer["score"]), reason=answer["reason"], part=PART_JUDGE, success=answer["score"] >= 0.5,
                           threshold=0.5, judge_model="scripted-judge", metric="ToolCorrectnessMetric", metric_version="test",
                           prompt_version="p1", sample_rate=self.sample_rate, input_tokens=answer["input_tokens"],
                           output_tokens=answer["output_tokens"],
                           cost_usd=None if self.cost_per_token is None else tokens * self.cost_per_token, latency_s=0.0)
