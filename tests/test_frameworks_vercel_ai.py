"""The Vercel AI SDK (npm `ai` 6, its built-in telemetry) driven offline, read by `serve` and by `score`.

`tests/node/vercel_agent.mjs` runs `generateText` tool loops against the SDK's own mock model
(`MockLanguageModelV3` from `ai/test`): the `support_agent` run (its `telemetry.functionId`) calls
`local_index`, then `web_search`, whose execute throws, then answers; a second run names no agent.
The JS SDK exports the spans (`ai.generateText`, `ai.generateText.doGenerate`, `ai.toolCall`) over
OTLP/HTTP protobuf to a real `otel-agent-eval serve`, and writes them as OTLP/JSON lines to a file
that `score_traces` reads.

Needs node and `npm ci --prefix tests/node` (`make setup` does both); without them the test fails in one line.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from serve_process import serving, stop_cleanly
from test_serve_node import _local_only  # noqa: F401 - the same autouse fixture: senders reach 127.0.0.1 directly
from test_serve_node import CATALOG, DEADLINE_S, NODE_DIR, SETUP, clean_env, node_or_fail, scrape

from otel_agent_eval.offline.score import score_traces

AGENT = NODE_DIR / "vercel_agent.mjs"
INPUT_TOKENS, OUTPUT_TOKENS, STEP_TOKENS = 50, 10, 30  # as the script's mock model reports: step n has 50 + (n - 1) x 30 in


def node_with_ai() -> str:
    """The node binary with the OTel JS SDK and `ai` installed; the test fails in one line when they are missing."""
    node = node_or_fail()
    if not (NODE_DIR / "node_modules" / "ai" / "package.json").is_file():
        pytest.fail(f"tests/node/node_modules/ai is missing: {SETUP}", pytrace=False)
    return node


def test_a_vercel_ai_tool_loop_is_scored_by_serve_and_by_score(tmp_path: Path) -> None:
    node, spans_file = node_with_ai(), tmp_path / "vercel.otlp.jsonl"
    with serving("--no-grpc", "--http-port", "0", "--metrics-port", "0", "--catalog", str(CATALOG),
                 env=clean_env()) as (process, where):
        ran = subprocess.run([node, str(AGENT), "--endpoint", where["OTLP/HTTP"], "--file", str(spans_file)],
                             capture_output=True, text=True, timeout=DEADLINE_S, cwd=NODE_DIR)
        assert ran.returncode == 0, ran.stderr
        metrics = ""
        for _ in range(DEADLINE_S * 10):  # liveness only: serve scores as the requests arrive
            metrics = scrape(where["metrics"])
            if sum(sample.value for sample in _samples(metrics, "agent_eval_tool_calls_total")) >= 3:
                break
            time.sleep(0.1)
        stop_cleanly(process)

    calls = {(s.labels["gen_ai_tool_name"], s.labels["gen_ai_agent_name"], s.labels["outcome"]): s.value
             for s in _samples(metrics, "agent_eval_tool_calls_total")}
    assert calls == {("local_index", "support_agent", "optimal"): 1, ("web_search", "support_agent", "error"): 1,
                     ("local_index", "", "optimal"): 1}

    runs, scored = [], []
    score_traces(spans_file, CATALOG, on_run=runs.append, on_call=lambda record, score: scored.append(record))
    assert [(r.name, r.agent, r.arguments, r.error) for r in scored] == [
        ("local_index", "support_agent", {"query": "return policy"}, None),
        ("web_search", "support_agent", {"query": "refund window"}, "Error"),  # the SDK's exception event
        ("local_index", None, {"query": "shipping"}, None),  # no functionId: no agent in the trace
    ]
    named = next(run for run in runs if run.agent == "support_agent")
    assert [call.name for call in named.tool_calls] == ["local_index", "web_search"]
    # three model calls, each counted once at `ai.generateText.doGenerate`: the root's summed `ai.usage.*` is no other call
    assert [(c.model, c.input_tokens, c.output_tokens) for c in named.llm_calls] == [
        ("gpt-4.1-mini", INPUT_TOKENS + n * STEP_TOKENS, OUTPUT_TOKENS) for n in range(3)]
    assert named.evaluation is not None and not named.evaluation.completed  # the failed web_search was not recovered
    # what each result cost the later model calls (docs/true-cost.md): 80 - (50 + 10) = 20 added by local_index, held
    # by the 2nd and 3rd calls; 110 - (80 + 10) = 20 by web_search's error text, held by the 3rd; conserved exactly
    context = named.evaluation.context
    assert [(t.share, t.held_by, t.tokens) for t in context.calls] == [(20, 2, 40), (20, 1, 20)]
    assert context.input_tokens == 50 + 80 + 110 == context.attributed_tokens + context.unattributed_tokens
    assert round(context.attributed_usd + context.unattributed_usd, 2) == round(context.input_usd, 2)
    for run in runs:
        if run.evaluation.context is not None:
            cost = run.evaluation.context
            assert cost.attributed_tokens + cost.unattributed_tokens == cost.input_tokens


def _samples(exposition: str, name: str):
    from prometheus_client.parser import text_string_to_metric_families

    return [s for family in text_string_to_metric_families(exposition) for s in family.samples if s.name == name]
