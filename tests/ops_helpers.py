"""Shared pieces of the operations-kit tests (tests/test_ops_*.py): paths, the Debian
Prometheus binaries, a Prometheus server of the tests' own, a live demo workload, and
the test copies of the rules with short durations.

Nothing here is skipped when a tool is missing: `binary()` fails the test with the way to
install it (`make setup` installs Debian's `prometheus` package).
"""
from __future__ import annotations

import copy
import gc
import json
import math
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "collector-config"
RULES_DIR = CONFIG_DIR / "rules"
RECORDING_RULES = RULES_DIR / "agent-eval-recording.yml"
ALERTING_RULES = RULES_DIR / "agent-eval-alerts.yml"
GENAI_VIEW_RULES = RULES_DIR / "agent-eval-genai-views.yml"  # opt-in, not in prometheus.yml (tests/test_ops_grafana_views.py)
RULE_FILES = (RECORDING_RULES, ALERTING_RULES)
RULE_TESTS_DIR = RULES_DIR / "tests"
PROMETHEUS_CONFIG = CONFIG_DIR / "prometheus.yml"
COLLECTOR_CONFIG = CONFIG_DIR / "otelcol.yaml"
COMPOSE_FILE = CONFIG_DIR / "docker-compose.yml"
DASHBOARD = CONFIG_DIR / "grafana" / "dashboards" / "agent-eval.json"
GRAFANA_DATASOURCES = CONFIG_DIR / "grafana" / "provisioning" / "datasources" / "datasources.yml"
GRAFANA_DASHBOARD_PROVIDERS = CONFIG_DIR / "grafana" / "provisioning" / "dashboards" / "dashboards.yml"
TEMPO_CONFIG = CONFIG_DIR / "tempo.yaml"
OPS_README = CONFIG_DIR / "README.md"
APP_JOB = "agent-eval"  # the scrape job of the apps; the availability alerts select it

INSTALL_HINT = ("is not on PATH. Run `make setup` (it installs Debian's `prometheus` package, which carries "
                "`prometheus` and `promtool`), or install it yourself: "
                "`sudo apt-get install --no-install-recommends prometheus`.")

T = TypeVar("T")


def binary(name: str) -> str:
    """The path of a Prometheus binary; fails the test (never skips) when it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"`{name}` {INSTALL_HINT}", pytrace=False)
    return path


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def rules_of(path: Path) -> list[dict[str, Any]]:
    """Every rule of a Prometheus rule file, in order."""
    return [rule for group in load_yaml(path)["groups"] for rule in group["rules"]]


def recording_rule_names() -> list[str]:
    return [r["record"] for r in rules_of(RECORDING_RULES)]


def alert_names() -> list[str]:
    return [r["alert"] for r in rules_of(ALERTING_RULES)]


# -- test copies with short durations ---------------------------------------------------
#
# The shipped rules use production windows (rate over 5m/10m/30m/1h, a baseline one day
# back, `for:` of 5 to 15 minutes). The integration test runs Prometheus for about a
# minute with 1 s scrape and evaluation intervals, so it evaluates *copies* in which
# every range `[d]` and `offset d` is replaced per SHORT_WINDOWS and every `for:` by
# SHORT_FOR. The day-over-day rules then compare the last 20 s with the 20 s before.
# A duration missing from the table fails loudly instead of being left long.

SHORT_WINDOWS = {"5m": "10s", "10m": "10s", "30m": "20s", "1h": "20s", "1d": "20s"}
SHORT_FOR = "1s"
TEST_INTERVAL = "1s"  # scrape and rule evaluation interval of the test copy of prometheus.yml


def shorten_durations(text: str) -> str:
    """A rule file's text with the test's short windows, offsets and `for:` durations."""
    def window(match: re.Match[str]) -> str:
        duration = match.group(2)
        if duration not in SHORT_WINDOWS:
            raise KeyError(f"no short test duration for {duration!r}: add it to ops_helpers.SHORT_WINDOWS")
        return f"{match.group(1)}{SHORT_WINDOWS[duration]}{match.group(3)}"

    text = re.sub(r"(\[)(\d+[smhdwy])(\])", window, text)
    text = re.sub(r"(\boffset\s+)(\d+[smhdwy])()", window, text)
    return re.sub(r"^(\s*for:\s*)\S+\s*$", rf"\g<1>{SHORT_FOR}", text, flags=re.MULTILINE)


def prometheus_test_config(rule_paths: list[Path], target: str) -> dict[str, Any]:
    """The shipped prometheus.yml, changed for a test run on localhost.

    Only the apps' job is kept, with `target` as its one static target (no file
    discovery), the intervals are TEST_INTERVAL and the rule files are `rule_paths`.
    """
    config = copy.deepcopy(load_yaml(PROMETHEUS_CONFIG))
    config["global"] = {"scrape_interval": TEST_INTERVAL, "scrape_timeout": TEST_INTERVAL,
                        "evaluation_interval": TEST_INTERVAL}
    config["rule_files"] = [str(p) for p in rule_paths]
    job = next(j for j in config["scrape_configs"] if j["job_name"] == APP_JOB)
    job["static_configs"] = [{"targets": [target]}]
    job.pop("file_sd_configs", None)
    config["scrape_configs"] = [job]
    return config


# -- waiting ------------------------------------------------------------------------------


def wait_for(check: Callable[[], T | None], *, timeout_s: float, what: str, interval_s: float = 0.25) -> T:
    """Poll `check` until it returns something truthy (returned); fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except (OSError, AssertionError, ValueError) as exc:  # not up yet, or not true yet
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}{detail}")
        time.sleep(interval_s)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- a Prometheus server of the test's own ------------------------------------------------


class PrometheusServer:
    """Debian's `prometheus` on a free localhost port with a temporary TSDB; never a system service.

    >>> with PrometheusServer(tmp_path, config) as prom:
    ...     prom.query("up")
    """

    def __init__(self, workdir: Path, config: Mapping[str, Any], flags: tuple[str, ...] = ()) -> None:
        self.workdir = workdir
        self.config = config
        self.flags = flags  # more command-line flags, e.g. --enable-feature=native-histograms
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log = workdir / "prometheus.log"

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout_s: float = 30.0) -> None:
        executable = binary("prometheus")
        config_file = self.workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(dict(self.config), sort_keys=False))
        self.port = free_port()
        command = [
            executable,
            f"--config.file={config_file}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            "--storage.tsdb.retention.time=1h",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--web.console.templates={self.workdir}",  # Debian's defaults point at /etc/prometheus
            f"--web.console.libraries={self.workdir}",
            "--log.level=warn",
            *self.flags,
        ]
        with self._log.open("wb") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)

        def ready() -> bool:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self._process.returncode}:\n{self.log_tail()}")
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return response.status == 200

        try:
            wait_for(ready, timeout_s=timeout_s, what=f"Prometheus on port {self.port} to be ready")
        except Exception:
            self.stop()
            raise

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; returns `data`, raises AssertionError on an API error."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
            raise AssertionError(f"/api/v1/{path} {params}: HTTP {exc.code}: {body.get('error', body)}") from None
        if body.get("status") != "success":
            raise AssertionError(f"/api/v1/{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's samples as [{"metric": {...}, "value": float}]."""
        data = self.api("query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": float(data["result"][1])}]
        return [{"metric": s["metric"], "value": float(s["value"][1])} for s in data["result"]]

    def alerts(self) -> list[dict[str, Any]]:
        return self.api("alerts")["alerts"]

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]


# -- a live workload: the product's demo, served on /metrics ------------------------------


class ScriptedJudge:
    """A tool-selection judge of the `judge.result.Judge` protocol that answers at once, without a model: the live
    workload's judge metrics (scores, outcomes, tokens, cost, latency) come from the product's own online judge
    around it. deepeval's real judge is tested against a scripted server in tests/test_judge_*.py."""

    def judge(self, request: Any) -> Any:
        from otel_agent_eval.judge.result import JudgeResult

        score = 0.9 if len(request.tools_called) <= 2 else 0.7
        return JudgeResult(score=score, reason="scripted", part="judge", success=score >= 0.5, threshold=0.5,
                           judge_model="scripted-judge", metric="ToolCorrectnessMetric", metric_version="test",
                           prompt_version="scripted", sample_rate=0.2, input_tokens=900, output_tokens=60,
                           cost_usd=0.0002, latency_s=0.0)


class LiveWorkload:
    """The demo's simulated agents (`otel_agent_eval.tools.demo.run_workload`) in a background
    thread at about `runs_per_s`, scored by a real `AgentEvalSpanProcessor` whose registry
    is served on a free localhost port. Set `suboptimal_share` at any time.

    The demo never repeats a successful call, so each batch adds one run of its own in
    which math_agent calls basic_calculator twice with the same arguments: a redundant
    call, and a run over the arithmetic task's max_calls of 1.
    """

    BATCHES_PER_S = 10

    def __init__(self, *, runs_per_s: float = 40.0, suboptimal_share: float = 0.05, seed: int = 1) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from prometheus_client import CollectorRegistry

        from otel_agent_eval.otel.processor import AgentEvalSpanProcessor

        self.registry = CollectorRegistry()
        # the online judge on a sample of runs, so that its rules and panels have series to read
        self.processor = AgentEvalSpanProcessor(registry=self.registry, judge=ScriptedJudge(), judge_sample_rate=0.2,
                                                judge_max_per_minute=100_000, judge_max_usd_per_hour=1_000.0)
        self._provider = TracerProvider(shutdown_on_exit=False)
        self._provider.add_span_processor(self.processor)
        self.suboptimal_share = suboptimal_share
        self.runs = 0
        self._runs_per_batch = max(1, round(runs_per_s / self.BATCHES_PER_S))
        self._seed = seed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ops-test-workload", daemon=True)
        self._server: Any = None
        self.error: BaseException | None = None
        self.target = ""

    def __enter__(self) -> LiveWorkload:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        from otel_agent_eval.tools.demo import start_metrics_server

        # The test process holds what every earlier test left (1.4 million objects in a full run): a full
        # collection of them, which this workload's allocations set off now and then, took 1.1 s, stalling the
        # scrape past its 1-s timeout (the target then reads as down). Frozen, the collector skips them.
        gc.freeze()
        self._server, url = start_metrics_server(self.registry, port=0, addr="127.0.0.1")
        self.target = urllib.parse.urlsplit(url).netloc
        self._thread.start()

    def _loop(self) -> None:
        from otel_agent_eval.tools.demo import run_workload

        period = 1.0 / self.BATCHES_PER_S
        next_batch = time.monotonic()
        try:
            while not self._stop.is_set():
                self._seed += 1
                run_workload(self.processor, runs=self._runs_per_batch, suboptimal_share=self.suboptimal_share,
                             seed=self._seed)
                self._repeated_call_run()
                self.runs += self._runs_per_batch + 1
                next_batch = max(next_batch + period, time.monotonic() - 1.0)
                self._stop.wait(max(0.0, next_batch - time.monotonic()))
        except Exception as exc:  # noqa: BLE001 - surfaced by the tests through .error
            self.error = exc

    def _repeated_call_run(self) -> None:
        from opentelemetry import trace

        from otel_agent_eval.core import conventions as c

        tracer = self._provider.get_tracer(__name__)
        ms = 1_000_000
        start = time.time_ns() - 20 * ms
        root = tracer.start_span(f"{c.OP_INVOKE_AGENT} math_agent", start_time=start, attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: "math_agent"})
        context = trace.set_span_in_context(root)
        for i in range(2):
            begin = start + (1 + 8 * i) * ms
            call = tracer.start_span(f"{c.OP_EXECUTE_TOOL} basic_calculator", context=context, start_time=begin, attributes={
                c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "basic_calculator",
                c.GEN_AI_TOOL_CALL_ID: f"call_{self._seed}_{i}", c.GEN_AI_TOOL_CALL_ARGUMENTS: '{"expression": "6 * 7"}',
                c.GEN_AI_TOOL_CALL_RESULT: "42"})
            call.end(end_time=begin + 5 * ms)
        root.end(end_time=start + 20 * ms)

    def pause(self) -> None:
        """Stop making calls but keep /metrics served: the counters then stand still."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        gc.unfreeze()


def exposed_metric_names() -> set[str]:
    """Every series name the product exposes, from a real exposition after a demo workload.

    Families are read from the `# TYPE` lines (present even before a labelled family has
    samples); counters add `_total`, histograms `_bucket`/`_sum`/`_count`, summaries
    `_sum`/`_count`.
    """
    from prometheus_client import CollectorRegistry, generate_latest

    from otel_agent_eval.tools.demo import run_workload
    from otel_agent_eval.otel.processor import AgentEvalSpanProcessor
    from otel_agent_eval.serve.durable import WalTotals
    from otel_agent_eval.serve.self_metrics import ServeMetrics

    registry = CollectorRegistry()
    ServeMetrics(registry=registry)  # serve's own families, beside the processor's
    wal = WalTotals()  # and those of serve --wal-dir's write-ahead log
    wal.update(0, {})
    registry.register(wal)
    processor = AgentEvalSpanProcessor(registry=registry)
    processor.metrics.start_judging()  # the judge's families, as a processor with a judge on exposes them
    run_workload(processor, runs=200, suboptimal_share=0.3, seed=3)
    names: set[str] = set()
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                        "summary": ("", "_sum", "_count")}.get(kind, ("",))
            names.update(name.removesuffix("_total") + suffix for suffix in suffixes)
            names.add(name)
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


# -- the dashboard ------------------------------------------------------------------------

#: What the integration test substitutes for Grafana's variables: every value selected
#: (the variables' allValue), and windows that hold a few 1 s scrapes.
GRAFANA_SUBSTITUTIONS = {"$job": ".*", "$agent": ".*", "$tool": ".*",
                         "$__rate_interval": "10s", "$__range": "30s", "$__interval": "2s"}


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels(board: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Every non-row panel, including panels nested in collapsed rows."""
    for panel in (board or dashboard())["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def grafana_expr(expr: str) -> str:
    """A panel's PromQL with Grafana's variables substituted as the integration test does."""
    for name in sorted(GRAFANA_SUBSTITUTIONS, key=len, reverse=True):  # $__rate_interval before $__range
        expr = expr.replace(name, GRAFANA_SUBSTITUTIONS[name])
    if "$" in expr.replace("$__", ""):
        raise AssertionError(f"unknown Grafana variable left in {expr!r}")
    return expr


def is_finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))


#: Plausible values per Grafana unit used on the dashboard.
UNIT_RANGES = {"percentunit": (0.0, 1.0), "currencyUSD": (0.0, 1e6), "s": (0.0, 600.0), "ops": (0.0, 1e6),
               "short": (0.0, 1e6), "none": (0.0, 100.0)}
