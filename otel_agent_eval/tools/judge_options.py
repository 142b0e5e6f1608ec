"""The `--judge*` options of `score` (and `compare`): deepeval's tool-selection judge on recorded runs.

deepeval is imported only when `--judge` is given. The key comes from the environment
(`OTEL_AGENT_EVAL_JUDGE_API_KEY`, `OTEL_AGENT_EVAL_JUDGE_API_KEY_FILE`, else `OPENAI_API_KEY` for
OpenAI's hosted models), never from the command line (where `ps` and shell history would show it).
"""
from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from ..config.settings import Settings

if TYPE_CHECKING:
    from ..config.catalog import Catalog
    from ..offline.judging import OfflineJudging

__all__ = ["add_judge_arguments", "judging_from"]


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a share of runs from 0 to 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < 86_400:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds above 0")
    return value


def add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("judge", "deepeval's ToolCorrectnessMetric with an LLM judging tool selection "
                                               "(docs/judge.md); off unless --judge is given")
    group.add_argument("--judge", metavar="MODEL",
                       help="judge sampled runs with this model: an OpenAI model (key in OTEL_AGENT_EVAL_JUDGE_API_KEY or "
                            "OPENAI_API_KEY), or any model of the server at --judge-base-url")
    group.add_argument("--judge-base-url", metavar="URL",
                       help="an OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio), e.g. http://localhost:11434/v1")
    group.add_argument("--judge-rate", type=_rate, default=1.0, metavar="RATE",
                       help="share of runs judged, 0-1 (default 1): the same runs as the online judge at that rate, chosen "
                            "by a hash of the trace id")
    group.add_argument("--judge-budget", action="append", default=[], metavar="CAP",
                       help="stop judging once the judgements cost $USD ($0.50 or 0.5usd) or number that many (200); "
                            "repeat for both; later runs are counted as over budget (default: no cap)")
    group.add_argument("--judge-arguments", action=argparse.BooleanOptionalAction, default=True,
                       help="also judge the calls' arguments where the spans recorded them (deepeval's "
                            "ArgumentCorrectnessMetric, two more model calls per run; default on)")
    group.add_argument("--judge-redact-keys", metavar="REGEX",
                       help="keys whose values are masked before anything goes to the judge (default: "
                            "OTEL_AGENT_EVAL_REDACT_KEYS, else common secret keys: passwords, tokens, API keys...)")
    group.add_argument("--judge-drop-tool-io", action="store_true", default=None,
                       help="send no tool arguments or results to the judge (default: OTEL_AGENT_EVAL_DROP_TOOL_IO)")
    group.add_argument("--judge-timeout", type=_seconds, default=30.0, metavar="SECONDS",
                       help="timeout of each request to the judge (default 30; deepeval retries on top)")


def judging_from(args: argparse.Namespace, catalog: Catalog) -> OfflineJudging | None:
    """The judging `--judge` asks for, or None; raises ValueError (one line) for bad options or a missing key."""
    given = [name for name in ("judge_base_url",) if getattr(args, name, None)]
    if getattr(args, "judge", None) is None:
        if given or args.judge_budget or args.judge_rate != 1.0:
            raise ValueError("--judge-base-url, --judge-rate and --judge-budget need --judge MODEL")
        return None
    from ..judge.deepeval_judge import DeepEvalJudge
    from ..judge.models import judge_model
    from ..judge.request import judge_redactor
    from ..offline.judging import OfflineJudging, parse_budget

    max_usd, max_judgements = parse_budget(args.judge_budget)
    settings = Settings.from_env()
    pattern = args.judge_redact_keys if args.judge_redact_keys is not None else settings.redact_keys
    drop = args.judge_drop_tool_io if args.judge_drop_tool_io is not None else settings.drop_tool_io
    model = judge_model(args.judge, base_url=args.judge_base_url, timeout_s=args.judge_timeout, models=catalog.models,
                        env=os.environ)
    judge = DeepEvalJudge(model, arguments=args.judge_arguments, sample_rate=args.judge_rate)
    return OfflineJudging(judge, catalog, rate=args.judge_rate, max_usd=max_usd, max_judgements=max_judgements,
                          redactor=judge_redactor(pattern, drop))
