"""Multimodal test cases score exactly as text ones: deepeval's MultimodalToolCorrectnessMetric, ported.

The seed (deepeval's "Multimodal Tool Correctness" page) says that metric "is not calculated
using any models or LLMs, and instead via exact matching between the expected_tools and
tools_called": Tool Correctness = correctly used tools / expected tools. deepeval 4.x folded
`MLLMTestCase` into `LLMTestCase` (images go into `input` as `MLLMImage`s) and refuses such a
test case in any metric without a multimodal judge model. Ours has no model, so a multimodal
test case must score exactly as its text twin. Expected scores below are worked out by hand
from the seed's definition.
"""
from __future__ import annotations

import json
import random

import pytest
from deepeval.test_case import LLMTestCase, MLLMImage, ToolCall, ToolCallParams
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from otel_agent_eval import DeterministicToolCorrectnessMetric, ToolEfficiencyMetric, score_traces
from otel_agent_eval.testing import run_to_test_case
from test_score import collector_lines, write

IMAGE = MLLMImage(url="https://example.com/running-shoes.png")
INPUT = "What's in this image?"
OUTPUT = "The image shows a pair of running shoes."


def cases(tools_called, expected_tools):
    """The multimodal test case and its text twin."""
    multimodal = LLMTestCase(input=f"{INPUT} {IMAGE}", actual_output=OUTPUT, tools_called=tools_called,
                             expected_tools=expected_tools)
    text = LLMTestCase(input=INPUT, actual_output=OUTPUT, tools_called=tools_called, expected_tools=expected_tools)
    assert multimodal.multimodal and not text.multimodal
    return multimodal, text


IA, TQ = ToolCall(name="ImageAnalysis"), ToolCall(name="ToolQuery")
SHOES_HIGH = ToolCall(name="ImageAnalysis", input_parameters={"image": "shoes.png", "detail": "high"}, output="running shoes")
SHOES_LOW = ToolCall(name="ImageAnalysis", input_parameters={"image": "shoes.png", "detail": "low"}, output="running shoes")
SHOES_BOOTS = ToolCall(name="ImageAnalysis", input_parameters={"image": "shoes.png", "detail": "high"}, output="boots")

# (metric options, tools called, expected tools, score, successful): by hand from the seed's definition.
SEED_CASES = [
    # The seed's example: the one expected tool was called (an extra call is no fault): 1/1.
    ({}, [IA, TQ], [IA], 1.0, True),
    # should_exact_match: "tools_called and expected_tools to be exactly the same": two calls are not one.
    ({"should_exact_match": True}, [IA, TQ], [IA], 0.0, False),
    ({"should_exact_match": True}, [IA], [IA], 1.0, True),
    # Order ignored by default: both expected tools were called, 2/2.
    ({}, [TQ, IA], [IA, TQ], 1.0, True),
    # should_consider_ordering: only one of the two is in the expected order, 1/2; the default threshold 0.5 passes...
    ({"should_consider_ordering": True}, [TQ, IA], [IA, TQ], 0.5, True),
    # ...a stricter threshold does not, and strict mode makes anything short of 1 a 0 (its threshold is 1).
    ({"should_consider_ordering": True, "threshold": 0.6}, [TQ, IA], [IA, TQ], 0.5, False),
    ({"should_consider_ordering": True, "strict_mode": True}, [TQ, IA], [IA, TQ], 0.0, False),
    # The seed's ordering example: expected [IA, TQ, IA], called [IA, IA, TQ]: the longest run in
    # the expected order is IA, TQ (or IA, IA), 2 of 3: "incorrect" as a whole (strict mode: 0).
    ({"should_consider_ordering": True}, [IA, IA, TQ], [IA, TQ, IA], 2 / 3, True),
    ({"should_consider_ordering": True, "strict_mode": True}, [IA, IA, TQ], [IA, TQ, IA], 0.0, False),
    # should_exact_match wins over should_consider_ordering ("setting should_consider_ordering will have no effect").
    ({"should_exact_match": True, "should_consider_ordering": True}, [TQ, IA], [IA, TQ], 0.0, False),
    # evaluation_params=[INPUT_PARAMETERS]: name matches, 1 of the 2 argument keys agrees: 1/2.
    ({"evaluation_params": [ToolCallParams.INPUT_PARAMETERS]}, [SHOES_LOW], [SHOES_HIGH], 0.5, True),
    ({"evaluation_params": [ToolCallParams.INPUT_PARAMETERS], "threshold": 0.75}, [SHOES_LOW], [SHOES_HIGH], 0.5, False),
    # ...with should_exact_match the arguments must be equal: 0.
    ({"evaluation_params": [ToolCallParams.INPUT_PARAMETERS], "should_exact_match": True}, [SHOES_LOW], [SHOES_HIGH], 0.0, False),
    # evaluation_params=[OUTPUT]: the output differs, so the tool was not correctly used: 0/1; without it, 1/1.
    ({"evaluation_params": [ToolCallParams.OUTPUT]}, [SHOES_BOOTS], [SHOES_HIGH], 0.0, False),
    ({}, [SHOES_BOOTS], [SHOES_HIGH], 1.0, True),
    ({"evaluation_params": [ToolCallParams.INPUT_PARAMETERS, ToolCallParams.OUTPUT]}, [SHOES_HIGH], [SHOES_HIGH], 1.0, True),
]


@pytest.mark.parametrize("options, called, expected, score, successful", SEED_CASES)
def test_the_seed_metric_scores_a_multimodal_case_exactly_as_its_text_twin(options, called, expected, score, successful):
    multimodal, text = cases(called, expected)
    for case in (multimodal, text):
        metric = DeterministicToolCorrectnessMetric(**options)
        assert metric.measure(case, _show_indicator=False) == pytest.approx(score, abs=1e-12)
        assert metric.is_successful() is successful and metric.error is None
        assert metric.reason and ("Correct tool usage" if score == 1 else "Incorrect tool usage") in metric.reason
    assert metric.threshold == (1 if options.get("strict_mode") else options.get("threshold", 0.5))


def test_multimodal_cases_go_through_deepeval_evaluate(tmp_path, monkeypatch):
    from deepeval import evaluate

    monkeypatch.chdir(tmp_path)
    good, _ = cases([IA, TQ], [IA])
    bad, _ = cases([TQ], [IA])
    result = evaluate(test_cases=[good, bad], metrics=[DeterministicToolCorrectnessMetric()])
    outcomes = sorted((r.metrics_data[0].score, r.metrics_data[0].success, r.metrics_data[0].error) for r in result.test_results)
    assert outcomes == [(0.0, False, None), (1.0, True, None)]


def test_the_efficiency_metric_scores_multimodal_cases_too():
    metric = ToolEfficiencyMetric(tool_costs={"ImageAnalysis": 0.0, "ToolQuery": 0.01},
                                  tool_latencies={"ImageAnalysis": 100, "ToolQuery": 900}, optimal_tool="ImageAnalysis")
    multimodal, text = cases([TQ], [IA])
    assert metric.measure(multimodal) == metric.measure(text) < 0.7 and not metric.is_successful()


# -- a recorded run whose input carries an image ----------------------------------------------------------------

def recorded_image_run(tmp_path, parts):
    """One GenAI agent run whose user message has `parts`, its tool calls, written as the Collector writes OTLP/JSON."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("vision-app")
    messages = json.dumps([{"role": "user", "parts": parts}])
    t = 1_750_000_000_000_000_000
    root = tracer.start_span("invoke_agent shoe_agent", start_time=t, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "shoe_agent", "gen_ai.input.messages": messages})
    rng = random.Random(3)
    for i, tool in enumerate(["ImageAnalysis", "ToolQuery"]):
        span = tracer.start_span(f"execute_tool {tool}", context=set_span_in_context(root), start_time=t + (i + 1) * 10**6,
                                 attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                                             "gen_ai.tool.call.id": f"call_{rng.randrange(10**6)}"})
        span.end(end_time=t + (i + 2) * 10**6)
    root.end(end_time=t + 10**7)
    path = write(tmp_path / "traces.json", collector_lines(list(memory.get_finished_spans())))
    runs = []
    score_traces(path, on_run=runs.append)
    (run,) = runs
    return run_to_test_case(run)


def test_a_recorded_run_with_an_image_input_becomes_a_multimodal_case_and_scores_as_text(tmp_path):
    case = recorded_image_run(tmp_path, [
        {"type": "text", "content": INPUT},
        {"type": "uri", "modality": "image", "mime_type": "image/png", "uri": "https://example.com/shoes.png"},
        {"type": "blob", "modality": "image", "mime_type": "image/png", "content": "iVBORw0KGgo="},
    ])
    assert case.multimodal and case.input.startswith(INPUT + " [DEEPEVAL:IMAGE:")
    images = [part for part in MLLMImage.parse_multimodal_string(case.input) if isinstance(part, MLLMImage)]
    assert [(i.url, i.dataBase64, i.mimeType) for i in images] == [
        ("https://example.com/shoes.png", None, "image/png"), (None, "iVBORw0KGgo=", "image/png")]
    text = case.model_copy(update={"input": INPUT, "multimodal": False})
    # called [ImageAnalysis, ToolQuery]: by hand, against each expected list
    for options, expected, score in (({}, [IA], 1.0), ({"should_exact_match": True}, [IA], 0.0),
                                     ({"should_consider_ordering": True}, [TQ, IA], 0.5),
                                     ({"should_consider_ordering": True, "strict_mode": True}, [TQ, IA], 0.0)):
        scores = []
        for each in (case, text):
            metric = DeterministicToolCorrectnessMetric(**options)
            scores.append(metric.measure(each.model_copy(update={"expected_tools": expected}), _show_indicator=False))
        assert scores == [score, score], options


def test_image_parts_that_name_local_files_or_unknown_schemes_are_left_out(tmp_path):
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"private")
    case = recorded_image_run(tmp_path, [
        {"type": "text", "content": INPUT},
        {"type": "uri", "modality": "image", "mime_type": "image/png", "uri": str(secret)},
        {"type": "uri", "modality": "image", "mime_type": "image/png", "uri": f"file://{secret}"},
        {"type": "uri", "modality": "image", "uri": "gs://bucket/shoes.png"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
    ])
    images = [part for part in MLLMImage.parse_multimodal_string(case.input) if isinstance(part, MLLMImage)]
    assert [(i.url, i.dataBase64, i.mimeType) for i in images] == [(None, "/9j/4AAQ", "image/jpeg")]
    assert "cHJpdmF0ZQ" not in case.input  # base64 of b"private": never read
