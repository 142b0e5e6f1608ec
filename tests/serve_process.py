"""`otel-agent-eval serve` as a real process for the serve tests: started, read, stopped, never left behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

FREE_PORTS = ("--grpc-port", "0", "--http-port", "0", "--metrics-port", "0")
START_DEADLINE_S = 30.0
_PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "grpc_proxy", "all_proxy", "ALL_PROXY")


def local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Senders in the test reach 127.0.0.1 directly, with their own settings only: requests and grpc honour
    proxy variables, the SDK exporters the OTEL_EXPORTER_OTLP_* ones, and requests lets REQUESTS_CA_BUNDLE and
    CURL_CA_BUNDLE override an exporter's `certificate_file` (psf/requests#3829)."""
    for name in (*_PROXY_VARIABLES, "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                 *[k for k in os.environ if k.startswith("OTEL_EXPORTER_OTLP")]):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def start_serve(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """Start `serve` with `args` (the packaged catalog unless `env` says otherwise); returns the process and
    where it listens, read from its first line ({"OTLP/HTTP": url, "metrics": url, ..., "forwarding to": url (protocol)})."""
    process = subprocess.Popen([sys.executable, "-m", "otel_agent_eval.tools.cli", "serve", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env if env is not None else {**os.environ, "OTEL_AGENT_EVAL_CATALOG": ""})
    line = first_line(process)
    if not line.startswith("otel-agent-eval serve: "):
        process.kill()
        process.wait()
        raise AssertionError((line, process.stderr.read()))
    where = {}
    for part in line.strip().split(": ", 1)[1].split(", "):  # "OTLP/HTTP on URL", ..., "forwarding to URL (protocol)"
        if " on " in part:
            what, url = part.split(" on ", 1)
            where[what] = url
        elif part.startswith("forwarding to "):
            where["forwarding to"] = part.removeprefix("forwarding to ")
    return process, where


def first_line(process: subprocess.Popen[str]) -> str:
    """The process's first line of output, or "" when none came within the deadline (never blocks for good)."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_DEADLINE_S)
    return lines[0] if lines else ""


@contextmanager
def serving(*args: str, env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    """`start_serve`, and the process killed on the way out if the test left it running."""
    process, where = start_serve(*args, env=env)
    try:
        yield process, where
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def stop_cleanly(process: subprocess.Popen[str]) -> None:
    """SIGTERM: the graceful shutdown ends in exit 0, without a traceback."""
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert "Traceback" not in process.stderr.read()
