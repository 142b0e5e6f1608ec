"""The scripted OpenAI-compatible judge server of the tests, which the bench's judge section also runs: it lives in
`otel_agent_eval/tools/bench/judge_server.py` (where a bench run from an installed package finds it)."""
from otel_agent_eval.tools.bench.judge_server import GARBAGE, SELECTION_MARK, VERDICTS_MARK, JudgeServer, Recorded, Reply

__all__ = ["GARBAGE", "SELECTION_MARK", "VERDICTS_MARK", "JudgeServer", "Recorded", "Reply"]
