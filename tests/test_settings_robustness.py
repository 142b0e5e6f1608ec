"""Settings and arguments that cannot be used: logged once and the default used (install, environment),
a ValueError naming them (the processor's constructor), redaction failing closed, and nothing half-installed."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

import otel_agent_eval.otel.install as install_module
from otel_agent_eval import AgentEvalSpanProcessor, install
from otel_agent_eval.config.settings import Settings
from otlp_receiver import running_receiver

TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search", "gen_ai.agent.name": "support_agent",
        "gen_ai.tool.call.arguments": json.dumps({"query": "balance", "api_key": "sk-live-123", "password": "hunter2"})}
CALLS = "agent_eval_processor_spans_scored_total"
OVERFLOW, DEEP, BROKEN = "a{99999999999}", "(" * 5000 + ")" * 5000, "password|(token"


@pytest.fixture(autouse=True)
def _no_agent_eval_env(monkeypatch):
    for name in [k for k in os.environ if k.startswith("OTEL_AGENT_EVAL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_AGENT_EVAL_METRICS_PORT", "0")  # the default a bad port argument falls back to


def scrape(processor) -> str:
    host, port = processor.metrics_address
    return urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()


def one_tool_span(provider, attributes=TOOL, **extra) -> None:
    provider.get_tracer("t").start_span("execute_tool web_search", attributes={**attributes, **extra}).end()


def warnings_about(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


# -- 1, 2: a redaction pattern that cannot be used ----------------------------------------------------------------

@pytest.mark.parametrize("pattern", [OVERFLOW, DEEP, BROKEN], ids=["overflow", "deep", "re.error"])
def test_a_bad_redact_keys_variable_is_one_log_line_and_redaction_fails_closed(pattern, caplog):
    with caplog.at_level(logging.WARNING):
        settings = Settings.from_env({"OTEL_AGENT_EVAL_REDACT_KEYS": pattern})  # OverflowError, RecursionError escaped
    (line,) = warnings_about(caplog, "OTEL_AGENT_EVAL_REDACT_KEYS")
    assert "failing closed" in line and settings.redact_keys  # not the default None: redaction stays on


def exported(processor_or_install, **options):
    """The attributes of one tool span and one plain span, as the forwarded exporter receives them."""
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    forward = SimpleSpanProcessor(exporter)
    if processor_or_install == "install":
        install(tracer_provider=provider, registry=CollectorRegistry(), serve_metrics=False, forward_to=forward, **options)
    else:
        provider.add_span_processor(AgentEvalSpanProcessor(registry=CollectorRegistry(), forward_to=forward, **options))
    one_tool_span(provider)
    provider.get_tracer("t").start_span("http", attributes={"app.api_key": "sk-live-456", "app.user": "ann"}).end()
    provider.force_flush()
    return {s.name: dict(s.attributes) for s in exporter.get_finished_spans()}


@pytest.mark.parametrize("how", ["environment", "install", "processor"])
def test_a_broken_redaction_pattern_never_lets_secrets_out(how, monkeypatch, caplog):
    if how == "environment":
        monkeypatch.setenv("OTEL_AGENT_EVAL_REDACT_KEYS", BROKEN)
        spans = exported("install")
    else:
        with caplog.at_level(logging.ERROR):
            spans = exported("install" if how == "install" else "processor", redact_keys=BROKEN)
        assert len(warnings_about(caplog, "redact_keys='password|(token'")) == 1
    text = str(spans)
    assert "sk-live-123" not in text and "hunter2" not in text and "sk-live-456" not in text
    tool, plain = spans["execute_tool web_search"], spans["http"]
    assert "gen_ai.tool.call.arguments" not in tool  # tool I/O dropped: the keys the pattern meant are unknown
    assert tool["agent_eval.outcome"] and plain["app.api_key"] == "[REDACTED]" and plain["app.user"] == "ann"


def test_a_redaction_pattern_that_overflows_never_stops_the_zero_code_exporter(tmp_path):
    """Under opentelemetry-instrument, re.compile's OverflowError escaped the settings: no span processor, no tracing."""
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent(f'''
        import os, urllib.request
        from opentelemetry import trace
        tracer = trace.get_tracer("app")
        tracer.start_span("execute_tool web_search", attributes={TOOL!r}).end()
        trace.get_tracer_provider().force_flush()
        print(urllib.request.urlopen("http://127.0.0.1:" + os.environ["PORT"] + "/metrics", timeout=10).read().decode())
    '''))
    port = _free_port()
    with running_receiver("http") as receiver:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DEEPEVAL_"))}
        env.update({"OTEL_TRACES_EXPORTER": "agent_eval", "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
                    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,
                    "OTEL_AGENT_EVAL_METRICS_PORT": str(port), "PORT": str(port), "OTEL_AGENT_EVAL_REDACT_KEYS": OVERFLOW,
                    "NO_PROXY": "127.0.0.1,localhost"})
        instrument = Path(sys.executable).with_name("opentelemetry-instrument")
        run = subprocess.run([str(instrument), sys.executable, str(app)], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        (span,) = receiver.wait_for_spans(1, timeout=20)
    assert "Traceback" not in run.stderr and run.stderr.count("OTEL_AGENT_EVAL_REDACT_KEYS") == 1, run.stderr
    assert f"{CALLS} 1.0" in run.stdout
    assert "gen_ai.tool.call.arguments" not in span["attributes"] and "hunter2" not in json.dumps(span)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- 3, 4: install() arguments, constructor options ------------------------------------------------------------

@pytest.mark.parametrize("argument", [
    dict(port=-1), dict(port="abc"), dict(port=70000), dict(addr=5), dict(evaluation_events="stdout"), dict(catalog=123),
    dict(window_s="x"), dict(window_s=-5), dict(window_s=float("inf")), dict(run_ttl_s=-1), dict(max_open_traces=0),
    dict(max_open_traces=-1), dict(max_calls_per_run=-1), dict(max_unknown_tools=-1), dict(max_agents=1.5),
    dict(max_samples="many"), dict(queue_limit=0), dict(profile=3), dict(environment=""),
], ids=lambda a: "{}={!r}".format(*next(iter(a.items()))))
def test_a_bad_install_argument_is_logged_naming_it_and_the_default_used(argument, caplog):
    (name, value), = argument.items()
    provider, registry = TracerProvider(), CollectorRegistry()
    with caplog.at_level(logging.WARNING):
        processor = install(tracer_provider=provider, registry=registry, **argument)
    assert len(warnings_about(caplog, f"install({name}={value!r})")) == 1, caplog.text
    one_tool_span(provider)
    assert f"{CALLS} 1.0" in scrape(processor)  # the app started, scores, serves /metrics on the default (0)
    assert "failed" not in caplog.text and "Traceback" not in caplog.text
    processor.shutdown()


def test_a_bad_window_from_install_scores_every_span_without_errors(caplog):
    provider = TracerProvider()
    with caplog.at_level(logging.WARNING):
        processor = install(tracer_provider=provider, registry=CollectorRegistry(), window_s=-5, max_open_traces=0)
    for _ in range(3):
        one_tool_span(provider)
    text = scrape(processor)
    assert f"{CALLS} 3.0" in text and 'agent_eval_tool_latency_seconds_count{gen_ai_agent_name="support_agent"' in text
    assert "on_end failed" not in caplog.text and "StopIteration" not in caplog.text
    assert len(processor.runs) == 0 and processor.runs._max_traces == 10_000
    processor.shutdown()


@pytest.mark.parametrize("option", [
    dict(window_s=-5), dict(window_s="x"), dict(window_s=0), dict(run_ttl_s=-1), dict(max_open_traces=0),
    dict(max_open_traces=-1), dict(max_calls_per_run=-1), dict(max_unknown_tools=-2), dict(max_agents="x"),
    dict(max_samples=-1), dict(queue_limit="x"), dict(queue_limit=0), dict(evaluation_events="stdout"),
], ids=lambda a: "{}={!r}".format(*next(iter(a.items()))))
def test_a_bad_constructor_option_raises_naming_it_and_registers_nothing(option):
    (name, value), = option.items()
    registry = CollectorRegistry()
    with pytest.raises(ValueError, match=f"^otel-agent-eval: {name}="):
        AgentEvalSpanProcessor(registry=registry, **option)
    AgentEvalSpanProcessor(registry=registry).shutdown()  # the registry was left as it was


def test_a_failure_after_the_processor_was_built_leaves_nothing_installed(monkeypatch):
    """Was: added to the provider and its metrics registered, so the corrected retry said 'already holds'."""
    provider, registry = TracerProvider(), CollectorRegistry()
    forward = SimpleSpanProcessor(InMemorySpanExporter())

    def broken_attach(*args, **kwargs):
        raise OverflowError("bind(): port must be 0-65535.")

    monkeypatch.setattr(install_module, "attach", broken_attach)
    with pytest.raises(OverflowError):
        install(tracer_provider=provider, registry=registry, forward_to=forward)
    assert provider._active_span_processor._span_processors == ()
    monkeypatch.undo()
    monkeypatch.setenv("OTEL_AGENT_EVAL_METRICS_PORT", "0")
    processor = install(tracer_provider=provider, registry=registry, forward_to=forward)  # the retry goes through
    assert provider._active_span_processor._span_processors == (processor,)
    one_tool_span(provider)
    assert f"{CALLS} 1.0" in scrape(processor)
    processor.shutdown()


# -- 5: the configured profile and environment, once the configured catalog loads --------------------------------

USER_CATALOG = textwrap.dedent("""\
    default_profile: balanced
    default_environment: production
    tools:
      lookup: {cost_usd: 0.001, latency_ms: 20, capabilities: [search], complexity: simple}
    profiles:
      balanced: {cost_weight: 0.5, latency_weight: 0.5}
      cheap: {cost_weight: 0.9, latency_weight: 0.1}
    thresholds:
      production: {warn: 0.95, fail: 0.85}
      lenient: {warn: 0.5, fail: 0.4}
""")


def test_a_reload_after_a_fallback_applies_the_configured_profile_and_environment(tmp_path, monkeypatch, caplog):
    path = tmp_path / "catalog.yaml"
    path.write_text("tools: 3\n")
    monkeypatch.setenv("OTEL_AGENT_EVAL_PROFILE", "cheap")
    monkeypatch.setenv("OTEL_AGENT_EVAL_ENVIRONMENT", "lenient")
    processor = install(path, tracer_provider=TracerProvider(), registry=CollectorRegistry(), serve_metrics=False)
    assert processor.scorer.default_profile.name == "balanced"  # the packaged catalog has no `cheap`
    path.write_text(USER_CATALOG)
    assert processor.reload_catalog()
    assert processor.scorer.default_profile.name == "cheap" and processor.scorer.thresholds.environment == "lenient"
    assert processor.reload_catalog() and processor.scorer.default_profile.name == "cheap"  # and they stay
    processor.shutdown()

    path.write_text("tools: 3\n")
    monkeypatch.setenv("OTEL_AGENT_EVAL_PROFILE", "nowhere")
    processor = install(path, tracer_provider=TracerProvider(), registry=CollectorRegistry(), serve_metrics=False)
    path.write_text(USER_CATALOG)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert processor.reload_catalog()
    assert processor.scorer.default_profile.name == "balanced" and processor.scorer.thresholds.environment == "lenient"
    (line,) = warnings_about(caplog, "OTEL_AGENT_EVAL_PROFILE='nowhere' is not in the reloaded catalog")
    assert "using the catalog's default" in line
    processor.shutdown()


# -- 6: the fallback gauge in prometheus-client's multiprocess mode ------------------------------------------------

MULTIPROCESS_APP = textwrap.dedent('''
    import os, sys, urllib.request
    from pathlib import Path
    from opentelemetry.sdk.trace import TracerProvider
    from prometheus_client.multiprocess import mark_process_dead
    import otel_agent_eval

    path = Path(sys.argv[1])
    path.write_text("tools: 3\\n")
    provider = TracerProvider()
    processor = otel_agent_eval.install(path, tracer_provider=provider, port=0)  # the "master", before forking
    host, port = processor.metrics_address

    def fallback():
        text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
        assert text.count("# HELP agent_eval_catalog_fallback ") == 1, text
        return [l for l in text.splitlines() if l.startswith("agent_eval_catalog_fallback")]

    print("start", fallback())
    go, wait = os.pipe()
    pid = os.fork()
    if pid == 0:  # a worker: scores with the catalog it was forked with until it ends
        provider.get_tracer("w").start_span("t", attributes={"gen_ai.operation.name": "execute_tool",
                                                             "gen_ai.tool.name": "web_search"}).end()
        provider.force_flush()
        os.close(go)
        os.read(wait, 1)
        os._exit(0)
    os.close(wait)
    path.write_text("tools: {calc: {cost_usd: 0, latency_ms: 1, capabilities: [math], complexity: simple}}\\n")
    assert processor.reload_catalog()
    import time; time.sleep(0.5)
    print("master fixed, worker alive", fallback())
    os.close(go)
    os.waitpid(pid, 0)
    mark_process_dead(pid)
    print("worker gone", fallback())
''')


def test_multiprocess_mode_serves_the_catalog_fallback_of_every_live_process(tmp_path):
    app = tmp_path / "app.py"
    app.write_text(MULTIPROCESS_APP)
    multiproc = tmp_path / "prom"
    multiproc.mkdir()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_AGENT_EVAL_")},
           "PROMETHEUS_MULTIPROC_DIR": str(multiproc)}
    run = subprocess.run([sys.executable, str(app), str(tmp_path / "catalog.yaml")], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "start ['agent_eval_catalog_fallback 1.0']",
        "master fixed, worker alive ['agent_eval_catalog_fallback 1.0']",  # the worker still scores with the packaged one
        "worker gone ['agent_eval_catalog_fallback 0.0']",
    ]
