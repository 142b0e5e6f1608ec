"""The judge runs deepeval's real ToolCorrectnessMetric and OpenAI client against a scripted local server."""
from __future__ import annotations

import logging
import os

import pytest
from deepeval.metrics import ToolCorrectnessMetric
from deepeval.test_case import LLMTestCase, ToolCall

from judge_server import GARBAGE, VERDICTS_MARK, JudgeServer, Reply
from otel_agent_eval.config.catalog import ModelPrice
from otel_agent_eval.judge.deepeval_judge import DeepEvalJudge, INPUT_NOT_RECORDED
from otel_agent_eval.judge.models import API_KEY_ENV, JudgeModelError, judge_model
from otel_agent_eval.judge.request import JudgeRequest
from otel_agent_eval.offline.judged_metric import JudgedToolCorrectnessMetric

AVAILABLE = (ToolCall(name="WebSearch", description="Search the public web"),
             ToolCall(name="ToolQuery", description="Query the order database",
                      input_parameters={"type": "object", "properties": {"order_id": {"type": "string"}}}))


@pytest.fixture()
def server():
    with JudgeServer() as running:
        yield running


def request(called, expected=(), *, text="What if these shoes don't fit?", available=AVAILABLE):
    return JudgeRequest(trace_id=1, span_id=2, agent="support", task=None, input=text,
                        tools_called=tuple(called), available_tools=tuple(available), expected_tools=tuple(expected),
                        arguments_recorded=any(c.input_parameters is not None for c in called))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 0.5
        return self.now


def test_the_prompt_holds_the_available_tools_and_the_judge_gives_the_minimum(server):
    server.selection = (0.25, "ToolQuery was not needed to answer a refund question.")
    judge = DeepEvalJudge(judge_model("my-model", base_url=server.base_url), clock=Clock())
    result = judge.judge(request([ToolCall(name="WebSearch"), ToolCall(name="ToolQuery")], [ToolCall(name="WebSearch")]))
    (prompt,) = server.prompts()
    for tool in AVAILABLE:
        assert f'"name": "{tool.name}"' in prompt.split("ALL AVAILABLE TOOLS:")[1].split("TOOL CALLS MADE")[0]
        assert tool.description in prompt
    assert '"order_id"' in prompt  # the argument schema goes with the tool
    assert "What if these shoes don't fit?" in prompt
    assert (result.score, result.part, result.deterministic_score, result.selection_score) == (0.25, "judge", 1.0, 0.25)
    assert result.selection_reason == "ToolQuery was not needed to answer a refund question."
    assert "ToolQuery was not needed" in result.reason and not result.success
    assert result.latency_s == 0.5  # the injected clock: one tick between start and end
    assert (result.judge_model, result.metric, result.sample_rate) == ("my-model", "ToolCorrectnessMetric", 1.0)
    assert result.metric_version.startswith("deepeval 4.")
    assert result.prompt_version.startswith("sha256:") and len(result.prompt_version) == 19


def test_the_deterministic_part_gives_the_minimum_when_it_is_lower(server):
    server.selection = (1.0, "Fine.")
    judge = DeepEvalJudge(judge_model("my-model", base_url=server.base_url))
    result = judge.judge(request([ToolCall(name="WebSearch")], [ToolCall(name="WebSearch"), ToolCall(name="ToolQuery")]))
    assert (result.score, result.part, result.deterministic_score, result.selection_score) == (0.5, "deterministic", 0.5, 1.0)
    assert "Fine." in result.reason and result.success


def test_a_run_without_expected_tools_is_scored_by_the_judge_alone(server):
    server.selection = (0.75, "Mostly right.")
    judge = DeepEvalJudge(judge_model("my-model", base_url=server.base_url))
    result = judge.judge(request([ToolCall(name="WebSearch"), ToolCall(name="ToolQuery")], text=None))
    assert (result.score, result.part, result.deterministic_score) == (0.75, "judge", None)
    assert INPUT_NOT_RECORDED in server.prompts()[0]


def test_seed_001_usage_example_scores_the_same_through_deepevals_metric_and_the_projects(server):
    """Seed 001's example, with `available_tools` as the seed describes the parameter, and one scripted judge."""
    server.selection = (0.5, "ToolQuery adds nothing to a refund policy question.")
    available = [ToolCall(name="WebSearch", description="Searches the web"),
                 ToolCall(name="ToolQuery", description="Queries internal tools")]

    def seed_case():
        return LLMTestCase(input="What if these shoes don't fit?",
                           actual_output="We offer a 30-day full refund at no extra cost.",
                           tools_called=[ToolCall(name="WebSearch"), ToolCall(name="ToolQuery")],
                           expected_tools=[ToolCall(name="WebSearch")])

    theirs = ToolCorrectnessMetric(available_tools=available, model=judge_model("gpt-4o-mini", base_url=server.base_url),
                                   async_mode=False)
    theirs.measure(seed_case(), _show_indicator=False)
    ours = JudgedToolCorrectnessMetric(judge_model("gpt-4o-mini", base_url=server.base_url), available_tools=available)
    ours.measure(seed_case(), _show_indicator=False)
    assert theirs.score == ours.score == 0.5
    assert theirs.reason == ours.reason and theirs.success == ours.success
    assert theirs.evaluation_cost == pytest.approx(ours.evaluation_cost) and ours.evaluation_cost > 0
    first, second = server.prompts()
    assert first == second  # the same prompt: deepeval's own metric ran inside ours
    assert ours.judge_result.part == "judge"


def test_deepevals_async_path_gives_the_same_score_too(server):
    server.selection = (0.5, "Half right.")
    case = LLMTestCase(input="q", actual_output="a", tools_called=[ToolCall(name="WebSearch")],
                       expected_tools=[ToolCall(name="WebSearch")])
    theirs = ToolCorrectnessMetric(available_tools=list(AVAILABLE), model=judge_model("m", base_url=server.base_url))
    theirs.measure(case, _show_indicator=False)  # async_mode=True: deepeval's default
    ours = JudgedToolCorrectnessMetric(judge_model("m", base_url=server.base_url), available_tools=list(AVAILABLE))
    assert ours.measure(case, _show_indicator=False) == theirs.score == 0.5


def test_tokens_and_cost_of_a_model_deepeval_prices(server):
    server.queue(Reply({"score": 1.0, "reason": "ok"}, usage=(1000, 100)))
    judge = DeepEvalJudge(judge_model("gpt-4o-mini", base_url=server.base_url))
    result = judge.judge(request([ToolCall(name="WebSearch")], [ToolCall(name="WebSearch")]))
    assert (result.input_tokens, result.output_tokens) == (1000, 100)
    assert result.cost_usd == pytest.approx(1000 * 0.15e-6 + 100 * 0.6e-6)  # deepeval's gpt-4o-mini price


def test_a_model_deepeval_cannot_price_is_priced_by_the_catalog_else_genai_prices_else_unknown(server):
    from otel_agent_eval.core.prices import LLMPricer
    from otel_agent_eval.core.recognize import LLMCall

    called = request([ToolCall(name="WebSearch")], [ToolCall(name="WebSearch")])
    server.queue(Reply({"score": 1.0, "reason": "ok"}, usage=(2000, 500)))
    priced = judge_model("house-judge", base_url=server.base_url, models={"house-judge": ModelPrice(0.001, 0.002)})
    result = DeepEvalJudge(priced).judge(called)
    assert (result.input_tokens, result.output_tokens) == (2000, 500)
    assert result.cost_usd == pytest.approx(2 * 0.001 + 0.5 * 0.002)
    server.queue(Reply({"score": 1.0, "reason": "ok"}, usage=(1000, 100)))
    result = DeepEvalJudge(judge_model("mistral-small-latest", base_url=server.base_url)).judge(called)  # deepeval: no price
    usd, source = LLMPricer({}).price(LLMCall("mistral-small-latest", 1000, 100))
    assert source == "genai_prices" and usd > 0 and result.cost_usd == pytest.approx(usd)
    server.queue(Reply({"score": 1.0, "reason": "ok"}, usage=(7, 3)))
    result = DeepEvalJudge(judge_model("house-judge-unpriced-xyz", base_url=server.base_url)).judge(called)
    assert (result.input_tokens, result.output_tokens, result.cost_usd) == (7, 3, None)


def test_the_argument_judge_reads_only_calls_with_recorded_arguments_and_is_kept_apart(server):
    server.argument_verdict, server.argument_reason = "no", "order_id is not a refund question's argument."
    server.selection = (1.0, "Right tools.")
    judge = DeepEvalJudge(judge_model("m", base_url=server.base_url))
    called = [ToolCall(name="ToolQuery", input_parameters={"order_id": "A1"}), ToolCall(name="WebSearch")]
    result = judge.judge(request(called, [ToolCall(name="ToolQuery"), ToolCall(name="WebSearch")]))
    (verdicts_prompt,) = server.prompts(VERDICTS_MARK)
    sent = verdicts_prompt.rsplit("Tool Calls:", 1)[1]
    assert "ToolQuery" in sent and "WebSearch" not in sent
    assert result.argument_score == 0.0 and result.argument_reason == "order_id is not a refund question's argument."
    assert result.score == 1.0  # deepeval's ToolCorrectnessMetric score: the argument judge is a metric of its own
    assert len(server.requests) == 3  # selection, verdicts, reason


def test_no_argument_judge_without_recorded_arguments_or_when_turned_off(server):
    judge = DeepEvalJudge(judge_model("m", base_url=server.base_url))
    result = judge.judge(request([ToolCall(name="WebSearch")], [ToolCall(name="WebSearch")]))
    assert result.argument_score is None and len(server.requests) == 1
    judge = DeepEvalJudge(judge_model("m", base_url=server.base_url), arguments=False)
    result = judge.judge(request([ToolCall(name="WebSearch", input_parameters={"q": "x"})], [ToolCall(name="WebSearch")]))
    assert result.argument_score is None and len(server.requests) == 2


def test_a_judge_that_answers_garbage_raises_for_the_caller_to_count(server, monkeypatch):
    monkeypatch.setenv("DEEPEVAL_RETRY_MAX_ATTEMPTS", "1")
    server.queue(Reply(GARBAGE))
    judge = DeepEvalJudge(judge_model("m", base_url=server.base_url))
    with pytest.raises(Exception):
        judge.judge(request([ToolCall(name="WebSearch")], [ToolCall(name="WebSearch")]))


def test_the_prompt_version_is_stable_and_names_the_argument_judge():
    with JudgeServer() as server:
        model = judge_model("m", base_url=server.base_url)
        a, b = DeepEvalJudge(model).prompt_version, DeepEvalJudge(model).prompt_version
        without = DeepEvalJudge(model, arguments=False).prompt_version
    assert a == b != without
    assert not server.requests  # computed from deepeval's templates, no model call


def test_a_hosted_model_needs_a_key_and_the_key_is_sent_not_logged(server, caplog, tmp_path):
    with pytest.raises(JudgeModelError, match=API_KEY_ENV):
        judge_model("gpt-4o-mini", env={})
    assert judge_model("gpt-4o-mini", env={API_KEY_ENV: "sk-judge-secret"}) is not None
    key_file = tmp_path / "key"
    key_file.write_text("sk-from-file\n")
    caplog.set_level(logging.DEBUG)
    model = judge_model("m", base_url=server.base_url, api_key_file=key_file, env={})
    DeepEvalJudge(model).judge(request([ToolCall(name="WebSearch")], [ToolCall(name="WebSearch")]))
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-file"
    assert "sk-from-file" not in caplog.text and "sk-from-file" not in repr(model.__dict__)
    with pytest.raises(JudgeModelError, match="cannot read"):
        judge_model("m", base_url=server.base_url, api_key_file=tmp_path / "missing", env={})
    local = judge_model("m", base_url=server.base_url, env={})  # a local server needs no key
    DeepEvalJudge(local).judge(request([ToolCall(name="WebSearch")], [ToolCall(name="WebSearch")]))
    assert server.requests[-1].headers["authorization"] == "Bearer no-key"


def test_deepevals_own_telemetry_is_turned_off_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("DEEPEVAL_TELEMETRY_OPT_OUT", raising=False)
    judge_model("m", base_url="http://127.0.0.1:9/v1")
    assert os.environ["DEEPEVAL_TELEMETRY_OPT_OUT"] == "YES"
    monkeypatch.setenv("DEEPEVAL_TELEMETRY_OPT_OUT", "NO")
    judge_model("m", base_url="http://127.0.0.1:9/v1")
    assert os.environ["DEEPEVAL_TELEMETRY_OPT_OUT"] == "NO"


@pytest.mark.parametrize("reply", [Reply(status=429), Reply(status=500), Reply(hang=True)], ids=["429", "500", "hang"])
def test_a_judge_that_refuses_or_hangs_raises_with_one_line_and_the_server_still_closes(reply, monkeypatch):
    from otel_agent_eval.judge.result import describe_error

    monkeypatch.setenv("DEEPEVAL_RETRY_MAX_ATTEMPTS", "1")
    with JudgeServer() as server:
        server.queue(reply)
        judge = DeepEvalJudge(judge_model("m", base_url=server.base_url, timeout_s=0.5))
        with pytest.raises(Exception) as caught:
            judge.judge(request([ToolCall(name="WebSearch")], [ToolCall(name="WebSearch")]))
        line = describe_error(caught.value)
        assert "\n" not in line and line.split(":")[0] in {"RateLimitError", "InternalServerError", "APITimeoutError"}
        assert len(server.requests) == 1
