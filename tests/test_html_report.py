"""The `--html` report of `otel-agent-eval score`, opened in a real headless Chromium.

Spans come from the real SDK (test_score's `App`), are written as the Collector's file
exporter writes them, scored by `otel-agent-eval score --html`, and the page is loaded by
Debian's `chromium` with networking cut off (a dead proxy, every host unresolvable) and a
net log: the DOM it builds must hold the charts with the Report's numbers, the console must
stay silent, and the page must start no request. Names from span content are hostile in
one test: they must show up as text, never as elements.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from otel_agent_eval import load_catalog
from otel_agent_eval.offline.gate import evaluate_gate
from otel_agent_eval.offline.recorded import ReadStats
from otel_agent_eval.offline.report import EFFICIENCY_BINS, HEALTH_BINS, ReportBuilder
from otel_agent_eval.offline.score import score_traces
from otel_agent_eval.tools.html_report import TOP_LATENCY_TOOLS, TOP_POOR_CHOICES, format_seconds, format_usd, render_html
from test_score import App, collector_lines, main_in_process, write

CHROMIUM_HINT = ("tests/test_html_report.py needs Debian's chromium on PATH (as chromium or chromium-browser): "
                 "sudo apt-get install -y --no-install-recommends chromium, or run `make setup`")
HOSTILE_AGENT = "<script>alert(1)</script>"
HOSTILE_TOOL = '"><img src=x onerror=alert(2)>'
CHARTS = {"efficiency-chart": "Efficiency distribution", "health-chart": "Run health distribution",
          "waste-chart": "Money wasted by tool → optimal tool", "latency-chart": "Latency percentiles per tool against the SLO",
          "context-chart": "Where the runs' input tokens came from"}


@pytest.fixture(autouse=True)
def _no_settings_from_the_environment(monkeypatch):
    for name in [k for k in os.environ if k.startswith("OTEL_AGENT_EVAL_")]:
        monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(CHROMIUM_HINT, pytrace=False)
    return found


@pytest.fixture(scope="module")
def app() -> Any:
    app = App().traces(80)
    yield app
    app.processor.shutdown()


# -- a browser with no network, and what it saw ------------------------------------------------------------

class Page:
    """What Chromium made of a file: its DOM (as parsed back here), console messages, requests the page started."""

    def __init__(self, dom: str, console: list[str], requests: list[str]) -> None:
        self.dom, self.console, self.requests = dom, console, requests
        parsed = _Dom()
        parsed.feed(dom)
        self.elements: list[tuple[str, dict[str, str | None]]] = parsed.elements
        self.text_by_id: dict[str, str] = parsed.text_by_id
        self.text = parsed.text

    def tags(self, name: str) -> list[dict[str, str | None]]:
        return [attrs for tag, attrs in self.elements if tag == name]

    def inside(self, element_id: str) -> str:
        return self.text_by_id[element_id]


class _Dom(HTMLParser):
    VOID = {"meta", "br", "img", "input", "link", "hr", "source", "area", "base", "col", "embed", "wbr", "track"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text_by_id: dict[str, str] = {}
        self.open: list[str | None] = []  # ids of the open elements
        self.text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.elements.append((tag, attributes))
        if tag in self.VOID:
            return
        element_id = attributes.get("id")
        if element_id:
            self.text_by_id.setdefault(element_id, "")
        self.open.append(element_id)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag not in self.VOID and self.open:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text += data
        for element_id in self.open:
            if element_id:
                self.text_by_id[element_id] += data


def browse(chromium: str, page: Path, work: Path) -> Page:
    """Load `page` in headless Chromium with the network cut off; the DOM after load, console lines, page requests."""
    work.mkdir(parents=True, exist_ok=True)
    net_log = work / "net-log.json"
    run = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
         "--disable-background-networking", "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
         f"--user-data-dir={work / 'profile'}", f"--log-net-log={net_log}", "--enable-logging=stderr", "--v=0",
         "--dump-dom", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    return Page(run.stdout, console, _page_requests(net_log))


def _page_requests(net_log: Path) -> list[str]:
    """URLs of network requests a page started (initiator: its origin); the browser's own background fetches
    (update checks, dictionaries; initiator "not an origin") are no page's doing and fail on the dead proxy anyway."""
    log = json.loads(net_log.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [e["params"]["url"] for e in log["events"]
            if e["type"] == start_job and "url" in e.get("params", {}) and e["params"].get("initiator") != "not an origin"]


def assert_self_contained(html: str) -> None:
    lowered = html.lower()
    for needle in ("http://", "https://", "src=", "href=", "url(", "@import", "<script", "<link", "<img", "<iframe"):
        assert needle not in lowered, needle


# -- the report, rendered ----------------------------------------------------------------------------------

def test_score_html_draws_the_reports_numbers_in_chromium(app, chromium, tmp_path):
    traces = write(tmp_path / "traces.json", collector_lines(app.spans()))
    (tmp_path / "out").mkdir()
    code, out, err = main_in_process(["traces.json", "--html", "out/report.html", "--fail-under", "efficiency=0"], tmp_path)
    assert (code, err) == (0, "") and "Gate: passed" in out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.html"]  # no temporary file left
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert_self_contained(html)
    report = score_traces(traces)
    draft = "otel-agent-eval catalog draft traces.json -o catalog.yaml"  # what the catalog lacks, and how to draft it
    assert html == render_html(report, evaluate_gate(report, {"efficiency": 0.0}), next_step=draft)
    assert "Coverage: what the catalog lacks" in html and f"<code>{draft}</code>" in html
    assert "<td>mystery_tool</td>" in html

    page = browse(chromium, tmp_path / "out" / "report.html", tmp_path / "browser")
    assert page.console == [] and page.requests == []
    svgs = {attrs["id"]: attrs for attrs in page.tags("svg")}
    assert set(svgs) == set(CHARTS)
    for chart_id, title in CHARTS.items():  # a text alternative for each: role, title and description
        assert svgs[chart_id]["role"] == "img"
        assert svgs[chart_id]["aria-labelledby"] == f"{chart_id}-title {chart_id}-desc"
        assert page.inside(f"{chart_id}-title") == title
        assert page.inside(f"{chart_id}-desc")
    for label in ("Per-call efficiency (0–1)", "Tool calls", "Run health (0–100)", "Agent runs",
                  "Money wasted (USD over the optimal tool's price)", "Call duration (log scale)",
                  "Input tokens of the runs' model calls"):
        assert label in page.text

    # efficiency: one bar per bin, its counts the report's, all calls in it
    assert sum(report.efficiency_histogram) == report.calls and len(report.efficiency_histogram) == EFFICIENCY_BINS
    efficiency = page.inside("efficiency-chart")
    assert f"Histogram of the efficiency of {report.calls:,} tool calls" in efficiency
    assert f"fail {report.thresholds.fail:g}" in efficiency and f"warn {report.thresholds.warn:g}" in efficiency
    for i, count in enumerate(report.efficiency_histogram):
        assert f"{i / EFFICIENCY_BINS:.2f}–{(i + 1) / EFFICIENCY_BINS:.2f}: {count:,}" in efficiency

    # run health: every evaluated run in one bin
    assert sum(report.health_histogram) == report.runs > 0 and len(report.health_histogram) == HEALTH_BINS
    health = page.inside("health-chart")
    assert f"Histogram of the health of {report.runs:,} agent runs" in health
    for i, count in enumerate(report.health_histogram):
        assert f"{i * 10:.0f}–{(i + 1) * 10:.0f}: {count:,}" in health

    # money wasted: the costliest poor choices, tool -> optimal tool with their sums
    waste = page.inside("waste-chart")
    assert report.poor_choices
    for p in report.poor_choices[:TOP_POOR_CHOICES]:
        assert f"{p.tool} → {p.optimal_tool}" in waste
        assert f"{format_usd(p.wasted_usd)} · {p.calls:,} calls" in waste
    poor_total = format_usd(sum(p.wasted_usd for p in report.poor_choices))
    assert f"{poor_total} wasted by {len(report.poor_choices)} suboptimal tool choices" in page.text
    assert f"of {format_usd(report.wasted_usd)} wasted in all" in page.text

    # latency: p50/p95/p99 per tool against its SLO, as the report has them
    latency = page.inside("latency-chart")
    shown = report.tool_latency[:TOP_LATENCY_TOOLS]
    assert sum(t.calls for t in report.tool_latency) == report.calls
    for t in shown:
        assert f"p50 {format_seconds(t.p50_s)} · p95 {format_seconds(t.p95_s)} · p99 {format_seconds(t.p99_s)}" in latency
        slo = CATALOG.tool(t.tool).latency_slo_ms / 1000 if t.known else None
        assert t.latency_slo_s == slo
        assert (f"SLO {format_seconds(slo)}" if slo is not None else "no SLO in the catalog") in latency
    circles = [a for tag, a in page.elements if tag == "circle"]
    assert len(circles) == 3 * len(shown)

    # the worst runs, lowest health first, with their tool sequences
    lists = page.tags("ol")
    assert 0 < len(report.worst_runs) <= 10 and len(lists) == sum(1 for r in report.worst_runs if r.calls)
    assert [r.health for r in report.worst_runs] == sorted(r.health for r in report.worst_runs)
    for run in report.worst_runs:
        assert run.trace_id[:16] in page.text
        assert "".join(c.tool for c in run.calls) in page.text.replace("\n", "")  # the chips, in order


CATALOG = load_catalog()


def hostile_traces() -> list[Any]:
    """An agent and a tool named to break out of HTML text and attributes, through the real SDK."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("hostile")
    t = 1_750_000_000_000_000_000
    for i in range(3):
        root = tracer.start_span(f"invoke_agent {HOSTILE_AGENT}", start_time=t, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": HOSTILE_AGENT})
        for j, tool in enumerate((HOSTILE_TOOL, "web_search", HOSTILE_AGENT)):
            span = tracer.start_span(f"execute_tool {tool}", context=set_span_in_context(root), start_time=t + j * 10**6,
                                     attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool})
            span.end(end_time=t + (j + 1) * 10**6 + i * 10**7)
        root.end(end_time=t + 10**8)
        t += 10**9
    return list(memory.get_finished_spans())


def test_hostile_names_are_shown_as_text_and_never_run(chromium, tmp_path):
    write(tmp_path / "traces.json", collector_lines(hostile_traces()))
    code, _, err = main_in_process(["traces.json", "--html", "report.html", "--fail-under", "efficiency=0"], tmp_path)
    assert code == 0, err
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert HOSTILE_AGENT not in html and HOSTILE_TOOL not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in html
    page = browse(chromium, tmp_path / "report.html", tmp_path / "browser")
    assert page.console == [] and page.requests == []
    assert page.tags("script") == [] and page.tags("img") == []  # no element was injected
    assert not any(name.startswith("on") for _, attrs in page.elements for name in attrs)
    assert HOSTILE_AGENT in page.text and HOSTILE_TOOL in page.text  # shown, as text
    assert HOSTILE_TOOL in page.inside("latency-chart")


def test_the_browser_check_sees_requests_and_console_messages(chromium, tmp_path):
    """The control: a page that does fetch and log is caught, so the empty lists above mean something."""
    page = write(tmp_path / "leaky.html", '<!DOCTYPE html><html><body><img src="http://example.com/x.png">'
                                          '<script>console.error("leak")</script></body></html>')
    seen = browse(chromium, page, tmp_path / "browser")
    assert set(seen.requests) == {"http://example.com/x.png"}
    assert len(seen.console) == 1 and '"leak"' in seen.console[0]


# -- the report's new parts, from real runs ------------------------------------------------------------------

def test_worst_runs_are_the_lowest_health_kept_by_a_bounded_heap(app, tmp_path):
    runs: list[Any] = []
    calls: list[Any] = []
    traces = write(tmp_path / "t.json", collector_lines(app.spans()))
    full = score_traces(traces, on_run=runs.append, on_call=lambda record, score: calls.append((record, score)))
    assert len(runs) == full.runs > 20
    for size in (0, 1, 5, len(runs) + 3):
        builder = ReportBuilder(CATALOG, worst_runs=size)
        for run in runs:
            builder.run(run)
        assert len(builder._worst) <= size  # never more than asked for, whatever the input
        kept = builder.build(ReadStats()).worst_runs
        expected = sorted(range(len(runs)), key=lambda i: (runs[i].evaluation.health, i))[:size]
        assert [(r.health, r.trace_id) for r in kept] == [
            (runs[i].evaluation.health, f"{runs[i].trace_id:032x}") for i in expected]
    worst = full.worst_runs[0]
    source = next(r for r in runs if f"{r.trace_id:032x}" == worst.trace_id and r.evaluation.health == worst.health)
    assert [c.tool for c in worst.calls] == [s.static.tool for s in source.scores]
    assert worst.wasted_usd == pytest.approx(sum(s.static.excess_cost_usd for s in source.scores))
    with pytest.raises(ValueError, match="worst_runs must be >= 0"):
        ReportBuilder(CATALOG, worst_runs=-1)
    data = full.to_dict()
    assert data["efficiency_histogram"] == list(full.efficiency_histogram)
    assert [r["trace_id"] for r in data["worst_runs"]] == [r.trace_id for r in full.worst_runs]


def test_an_empty_report_renders_with_explanations_not_charts():
    html = render_html(ReportBuilder(CATALOG).build(ReadStats()))
    assert "<svg" not in html and "No tool calls were scored." in html and "No agent runs were evaluated." in html
    assert "No suboptimal tool choices" in html and "No tool call had a duration." in html
    assert_self_contained(html)


def test_html_into_a_missing_directory_is_one_line_and_nothing_written(app, tmp_path):
    write(tmp_path / "traces.json", collector_lines(app.spans()[:30]))
    before = set(tmp_path.iterdir())
    code, out, err = main_in_process(["traces.json", "--html", "no/such/dir/r.html"], tmp_path)
    assert (code, out) == (2, "")
    assert err == "otel-agent-eval: --html no/such/dir/r.html: the directory no/such/dir does not exist\n"
    assert set(tmp_path.iterdir()) == before


# -- the latency chart's labels and axis --------------------------------------------------------------------

LONG_TOOL = "analyze_image_metadata_and_then_some_more_words_that_no_column_fits"


def tool_traces(tools: dict[str, int], model: str | None = None) -> list[Any]:
    """One agent run calling each tool once, `tools` mapping the name to the call's duration in ns (and `model`
    once, when given)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("latency")
    t = 1_750_000_000_000_000_000
    root = tracer.start_span("invoke_agent planner", start_time=t, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"})
    for tool, ns in tools.items():
        span = tracer.start_span(f"execute_tool {tool}", context=set_span_in_context(root), start_time=t,
                                 attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool})
        span.end(end_time=t + ns)
        t += ns
    if model is not None:
        tracer.start_span(f"chat {model}", context=set_span_in_context(root), start_time=t, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.usage.input_tokens": 100,
            "gen_ai.usage.output_tokens": 10}).end(end_time=t + 10**6)
    root.end(end_time=t + 10**6)
    return list(memory.get_finished_spans())


MEASURE = """<script>
const svg = document.getElementById("latency-chart");
const box = svg.viewBox.baseVal;
const out = [...svg.querySelectorAll("text")].map(t => {
  const b = t.getBBox();
  const text = [...t.childNodes].filter(n => n.nodeType === 3).map(n => n.data).join("");  // not its <title>
  return {text, left: b.x, right: b.x + b.width, inside: b.x >= box.x - 0.5 && b.x + b.width <= box.width + 0.5};
});
const pre = document.createElement("pre");
pre.id = "measured";
pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def test_latency_labels_fit_their_column_and_ticks_below_a_millisecond_read_so(chromium, tmp_path):
    tools = {"analyze_image_metadata": 13 * 10**6, "precipitation_forecast": 300_000, "search_knowledge": 680 * 10**6,
             LONG_TOOL: 4 * 10**6, "ab": 2 * 10**6}
    report = score_traces(write(tmp_path / "t.json", collector_lines(tool_traces(tools))))
    html = render_html(report, evaluate_gate(report))
    chart = html[html.index('<svg id="latency-chart"'):html.index("</svg>", html.index('<svg id="latency-chart"'))]
    assert f"<title>{LONG_TOOL} (unknown)</title>" in chart  # the whole name, where it is clipped
    assert LONG_TOOL[:30] in chart and f"{LONG_TOOL} (unknown)</text>" not in chart and "…</text>" in chart
    assert ">0.1 ms</text>" in chart and ">1 ms</text>" in chart and ">0 ms</text>" not in chart
    # measured in the browser: every label starts inside the chart and ends left of the plot
    page = tmp_path / "measure.html"
    page.write_text(html.replace("default-src 'none'; style-src 'unsafe-inline'", "default-src 'none'; style-src 'unsafe-inline'; "
                                 "script-src 'unsafe-inline'").replace("</main>", "</main>" + MEASURE), encoding="utf-8")
    seen = browse(chromium, page, tmp_path / "browser")
    measured = json.loads(seen.inside("measured"))
    labels = {m["text"]: m for m in measured if "(unknown)" in m["text"] or m["text"].startswith(LONG_TOOL[:20])}
    assert len(labels) == len(tools), measured
    assert all(m["left"] >= 0 for m in labels.values()), labels
    assert all(m["inside"] for m in measured), [m for m in measured if not m["inside"]]
    shortest = labels["ab (unknown)"]
    assert all(m["right"] == pytest.approx(shortest["right"], abs=1) for m in labels.values())  # right-aligned, uncut


def test_singular_counts_and_the_unknown_tools_note_only_with_unknown_tools(tmp_path):
    report = score_traces(write(tmp_path / "t.json", collector_lines(tool_traces({"web_search": 10**6}, "no-such-model-1"))))
    html = render_html(report, evaluate_gate(report))
    assert "spans from 1 file" in html and "1 agent run;" in html and "1 agent runs" not in html
    assert "lacks 1 model price (no-such-model-1: 1 call)." in html
    assert "Unknown tools score 0." not in html  # web_search is in the packaged catalog; only a price is missing
    assert "(no agent)" not in html and "planner" in html
    unknown = score_traces(write(tmp_path / "u.json", collector_lines(tool_traces({"not_in_the_catalog": 10**6}))))
    assert "Unknown tools score 0." in render_html(unknown, evaluate_gate(unknown))
