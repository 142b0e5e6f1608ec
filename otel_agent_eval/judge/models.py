"""The judge's model: deepeval's OpenAI client, for OpenAI itself or any OpenAI-compatible endpoint.

`judge_model("gpt-4o-mini")` is OpenAI's hosted model (key from `OTEL_AGENT_EVAL_JUDGE_API_KEY`, else
`OPENAI_API_KEY`); `judge_model("qwen2.5:7b", base_url="http://localhost:11434/v1")` is a local server
(vLLM, Ollama, llama.cpp's server, LM Studio), which needs no key. Any other deepeval model
(`AnthropicModel`, `GeminiModel`, `LiteLLMModel`...) can be handed to the judge as it is.

Every call's tokens are kept, also when deepeval knows no price for the model (it then drops them):
the cost is deepeval's price, else the project's LLM prices (`core.prices`: the catalog's `models`,
then genai-prices' table), else unknown (None). The key is held as deepeval holds it (a pydantic
`SecretStr`) and never logged.

    >>> model = judge_model("llama3.1", base_url="http://localhost:8000/v1")
    >>> model.get_model_name()
    'llama3.1'
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.prices import UNPRICED, LLMPricer
from ..core.recognize import LLMCall

if TYPE_CHECKING:
    from deepeval.models import DeepEvalBaseLLM

    from ..config.catalog import ModelPrice

__all__ = ["API_KEY_ENV", "API_KEY_FILE_ENV", "JudgeModelError", "NO_KEY", "judge_model", "model_name_of", "quiet_deepeval"]

logger = logging.getLogger(__name__)

API_KEY_ENV = "OTEL_AGENT_EVAL_JUDGE_API_KEY"
API_KEY_FILE_ENV = "OTEL_AGENT_EVAL_JUDGE_API_KEY_FILE"
OPENAI_KEY_ENV = "OPENAI_API_KEY"  # deepeval's own, for OpenAI's hosted models
NO_KEY = "no-key"  # what an OpenAI-compatible local server gets when no key is set (the client insists on one)
DEFAULT_TIMEOUT_S = 30.0


class JudgeModelError(ValueError):
    """The judge's model cannot be set up (no key for a hosted model, a key file that cannot be read): one line."""


def quiet_deepeval() -> None:
    """deepeval's own telemetry off (`DEEPEVAL_TELEMETRY_OPT_OUT`, unless the user set it), before deepeval is first
    imported: a judge the app turned on must not make network calls of its own besides the judge's."""
    os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")


def judge_model(model: str, *, base_url: str | None = None, api_key: str | None = None,
                api_key_file: str | os.PathLike[str] | None = None, timeout_s: float | None = DEFAULT_TIMEOUT_S,
                models: Mapping[str, ModelPrice] | None = None, env: Mapping[str, str] | None = None) -> DeepEvalBaseLLM:
    """deepeval's `OpenAIModel` for `model`, at `base_url` (None: OpenAI), counting tokens and pricing them.

    The key: `api_key`, else the file `api_key_file` (or `OTEL_AGENT_EVAL_JUDGE_API_KEY_FILE`), else
    `OTEL_AGENT_EVAL_JUDGE_API_KEY`, else `OPENAI_API_KEY`; an endpoint given by `base_url` may have none.
    `models` are the catalog's LLM prices (per 1k tokens), tried before genai-prices for models deepeval
    does not price. `timeout_s` bounds each HTTP request (deepeval's retries come on top).
    """
    if not isinstance(model, str) or not model.strip():
        raise JudgeModelError(f"judge model: a model name is needed, got {model!r}")
    env = os.environ if env is None else env
    key = api_key or _key_from_file(api_key_file or env.get(API_KEY_FILE_ENV)) or env.get(API_KEY_ENV) or (
        env.get(OPENAI_KEY_ENV) if base_url is None else None)
    if not key:
        if base_url is None:
            raise JudgeModelError(f"judge model {model!r}: no API key; set {API_KEY_ENV} (or {OPENAI_KEY_ENV}), "
                                  f"or give the base URL of an OpenAI-compatible server")
        key = NO_KEY
    quiet_deepeval()
    model_class = _priced_model_class()
    kwargs: dict[str, Any] = {}
    if timeout_s is not None:
        kwargs["timeout"] = float(timeout_s)
    instance = model_class(model=model.strip(), api_key=key, base_url=base_url, **kwargs)
    instance.pricer = LLMPricer(models or {})
    return instance


def model_name_of(model: Any) -> str:
    """The name a result records for a deepeval model (its `get_model_name()`), or its type's name."""
    try:
        name = model.get_model_name()
    except Exception:  # noqa: BLE001 - a custom model's name method may be anything
        name = None
    return name if isinstance(name, str) and name else type(model).__name__


def _key_from_file(path: str | os.PathLike[str] | None) -> str | None:
    if not path:
        return None
    try:
        key = Path(path).read_text(encoding="utf-8").strip()
    except OSError as error:
        raise JudgeModelError(f"judge API key file {os.fspath(path)!r}: cannot read it ({error.strerror})") from None
    if not key:
        raise JudgeModelError(f"judge API key file {os.fspath(path)!r} is empty")
    return key


_PRICED_CLASS: type | None = None


def _priced_model_class() -> type:
    """`OpenAIModel` with a `calculate_cost` that keeps the tokens and prices what deepeval cannot (built once)."""
    global _PRICED_CLASS
    if _PRICED_CLASS is not None:
        return _PRICED_CLASS
    from deepeval.models import OpenAIModel
    from deepeval.models.utils import EvaluationCost

    class PricedOpenAIModel(OpenAIModel):
        """deepeval's OpenAI client; unpriced calls keep their tokens and are priced by `core.prices`. Its sync client
        is made once and kept: deepeval makes a new one for every model call, and each loads the system's CA
        certificates for its SSL context (about two thirds of a judgement's CPU, measured) and opens a new connection."""

        pricer: LLMPricer = LLMPricer({})
        _kept_client: Any = None

        def load_model(self, async_mode: bool = False) -> Any:
            if async_mode:  # an async client belongs to its event loop: deepeval's own, made each time
                return super().load_model(async_mode=True)
            client = self._kept_client
            if client is None:  # two threads at once may each make one: both work, one is kept
                client = self._kept_client = super().load_model(async_mode=False)
            return client

        def calculate_cost(self, input_tokens: int, output_tokens: int, audio_input_tokens: int = 0) -> Any:
            cost = super().calculate_cost(input_tokens, output_tokens, audio_input_tokens)
            value = getattr(cost, "value", cost)
            if value is None:
                usd, source = self.pricer.price(LLMCall(self.name, int(input_tokens or 0), int(output_tokens or 0)))
                value = usd if source != UNPRICED else None
            return EvaluationCost(value, input_tokens, output_tokens)

    _PRICED_CLASS = PricedOpenAIModel
    return PricedOpenAIModel
