"""`otel-agent-eval serve` flags: a bad value ends in one line and exit 2 before anything listens; the listening line
gives URLs one can use.

The in-process cases also give a port that is taken, so that a flag let through ends in that port's error (and the
test fails) instead of serving for good.
"""
from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest
from serve_process import local_only, serving, stop_cleanly

from otel_agent_eval.tools.cli import main

CLI = [sys.executable, "-m", "otel_agent_eval.tools.cli", "serve"]


@pytest.fixture(autouse=True)
def _packaged_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)
    monkeypatch.setenv("OTEL_AGENT_EVAL_CATALOG", "")
    for name in ("OTEL_AGENT_EVAL_ENVIRONMENT", "OTEL_AGENT_EVAL_PROFILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port on 127.0.0.1 that this test listens on, so serve cannot."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def serve_args(busy_port: int) -> list[str]:
    return ["serve", "--grpc-port", "0", "--metrics-port", "0", "--http-port", str(busy_port)]


def test_unknown_environment_and_profile_flags_end_in_one_line(busy_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    environments = "<packaged default_catalog.yaml> has: development, staging, production"
    cases = {
        ("--env", "nosuch"): f"otel-agent-eval: serve: --environment 'nosuch': unknown environment; {environments}",
        ("--environment", "nosuch"): f"otel-agent-eval: serve: --environment 'nosuch': unknown environment; {environments}",
        ("--profile", "nosuch"): "otel-agent-eval: serve: --profile 'nosuch': unknown profile; "
                                 "<packaged default_catalog.yaml> has: balanced, cost_critical, latency_critical",
    }
    for args, expected in cases.items():
        assert main([*serve_args(busy_port), *args]) == 2, args
        assert capsys.readouterr().err.strip().splitlines() == [expected], args


def test_an_unknown_environment_from_the_variable_warns_and_uses_the_default(
        busy_port: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    """As the processor does: the variable is not refused (serve goes on, here to the taken port), it is named."""
    monkeypatch.setenv("OTEL_AGENT_EVAL_ENVIRONMENT", "nosuch")
    with caplog.at_level(logging.WARNING):
        assert main(serve_args(busy_port)) == 2
    assert "OTEL_AGENT_EVAL_ENVIRONMENT='nosuch' is not in the catalog" in caplog.text
    assert capsys.readouterr().err.strip().splitlines() == [
        f"otel-agent-eval: serve: cannot listen for OTLP/HTTP on 127.0.0.1:{busy_port}: Address already in use"]


@pytest.mark.parametrize("flag, listener", [("--http-port", "OTLP/HTTP"), ("--grpc-port", "OTLP/gRPC"),
                                            ("--metrics-port", "/metrics")])
def test_a_taken_port_ends_in_one_line_naming_the_listener(busy_port: int, flag: str, listener: str) -> None:
    ports = {"--grpc-port": "0", "--http-port": "0", "--metrics-port": "0", flag: str(busy_port)}
    run = subprocess.run([*CLI, *[x for pair in ports.items() for x in pair]], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "OTEL_AGENT_EVAL_CATALOG": ""})
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"otel-agent-eval: serve: cannot listen for {listener} on 127.0.0.1:{busy_port}: Address already in use"]


def test_forward_delay_and_timeout_out_of_range_end_in_one_line(busy_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        ("--forward-delay", "-1"): "serve: --forward-delay must be above 0 and at most 3600 s (got -1)",
        ("--forward-delay", "0"): "serve: --forward-delay must be above 0 and at most 3600 s (got 0)",
        ("--forward-delay", "inf"): "serve: --forward-delay must be above 0 and at most 3600 s (got inf)",
        ("--forward-timeout", "0"): "serve: --forward-timeout must be above 0 and at most 3600 s (got 0)",
        ("--forward-timeout", "-5"): "serve: --forward-timeout must be above 0 and at most 3600 s (got -5)",
        ("--forward-to", "http://127.0.0.1:9/v1/traces", "--forward-timeout", "0"):
            "serve: --forward-timeout must be above 0 and at most 3600 s (got 0)",
    }
    for args, expected in cases.items():
        assert main([*serve_args(busy_port), *args]) == 2, args
        assert capsys.readouterr().err.strip().splitlines() == [f"otel-agent-eval: {expected}"], args


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no ::1 on this machine")
def test_ipv6_urls_in_the_listening_line_are_bracketed_and_work() -> None:
    with serving("--bind", "::1", "--grpc-port", "0", "--http-port", "0", "--metrics-port", "0") as (process, where):
        assert where["OTLP/gRPC"].startswith("[::1]:")
        assert where["OTLP/HTTP"].startswith("http://[::1]:")
        assert where["metrics"].startswith("http://[::1]:") and where["metrics"].endswith("/metrics")
        with urllib.request.urlopen(where["metrics"].replace("/metrics", "/healthz"), timeout=10) as answer:
            assert answer.status == 200
        stop_cleanly(process)
