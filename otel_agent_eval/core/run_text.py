"""The text of an agent run: the user's input and the final answer, as the run's spans recorded them.

Read from the root span (OpenInference `input.value`, OpenLLMetry's entity input, GenAI messages, pydantic-ai's
`all_messages`), else from the first and last model calls. Images in the messages become deepeval `MLLMImage`
placeholders (deepeval is imported only then). The deepeval test cases (`offline.testing`) and the judge's
requests (`judge.request`) both read a run's text here.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from . import conventions as c
from .runs import AgentRun

__all__ = ["run_input", "run_output"]

_INPUT_KEYS = (c.OI_INPUT_VALUE, c.TRACELOOP_ENTITY_INPUT, c.GEN_AI_INPUT_MESSAGES, "pydantic_ai.all_messages")
_OUTPUT_KEYS = (c.OI_OUTPUT_VALUE, c.TRACELOOP_ENTITY_OUTPUT, c.GEN_AI_OUTPUT_MESSAGES, "final_result", "pydantic_ai.all_messages")


def run_input(run: AgentRun) -> str:
    """The user's input to the run, as text."""
    for key in _INPUT_KEYS:
        text = _message_text(run.root_attributes.get(key), role="user", first=True)
        if text:
            return text
    first = run.llm_calls[0].input_messages if run.llm_calls else None
    return _message_text(first, role="user", first=True) or ""


def run_output(run: AgentRun) -> str:
    """The run's final answer, as text."""
    for key in _OUTPUT_KEYS:
        text = _message_text(run.root_attributes.get(key), role="assistant", first=False)
        if text:
            return text
    last = run.llm_calls[-1].output_messages if run.llm_calls else None
    return _message_text(last, role="assistant", first=False) or ""


def _message_text(value: Any, *, role: str, first: bool) -> str | None:
    """Plain text from an attribute that is text, or JSON messages in the GenAI or chat shapes."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        if isinstance(parsed, str):
            return parsed
        value = parsed
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list):
        return str(value)
    texts = [t for t in (_text_of(m) for m in value if isinstance(m, Mapping) and m.get("role", role) == role) if t]
    if not texts:
        return None
    return texts[0] if first else texts[-1]


def _text_of(message: Mapping[str, Any]) -> str | None:
    """A message's text; its images (GenAI `uri`/`blob` parts, OpenAI `image_url`, Anthropic `image`) as deepeval
    `MLLMImage` placeholders in it, so the test case is multimodal as the run was."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = message.get("parts") or (content if isinstance(content, list) else [])
    text = ""
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") in ("text", None):
            piece = part.get("content") or part.get("text")
            if isinstance(piece, str):
                text += piece
            continue
        image = _image_of(part)
        if image is not None:
            text += (" " if text and not text.endswith((" ", "\n")) else "") + image
    return text or None


def _image_of(part: Mapping[str, Any]) -> str | None:
    """The `MLLMImage` placeholder for an image part, or None (not an image, or not one deepeval can hold).

    Only remote (http/https) URLs, data URIs and inline base64 become images: a span is data from
    elsewhere, and deepeval's `MLLMImage` would read a local path it names into the test case.
    """
    kind, modality = part.get("type"), part.get("modality")
    mime = part.get("mime_type") or part.get("mimeType")
    url: Any = None
    data: Any = None
    if kind == "image_url":  # OpenAI chat content: {"type": "image_url", "image_url": {"url": ...}}
        inner = part.get("image_url")
        url = inner.get("url") if isinstance(inner, Mapping) else inner
    elif kind == "image" and isinstance(part.get("source"), Mapping):  # Anthropic: base64 or url source
        source = part["source"]
        url, data, mime = source.get("url"), source.get("data"), source.get("media_type") or mime
    elif modality == "image" or (isinstance(mime, str) and mime.startswith("image/")):
        if kind == "uri":  # GenAI semantic conventions' UriPart / BlobPart
            url = part.get("uri")
        elif kind == "blob":
            data = part.get("content")
    if isinstance(url, str) and url.startswith("data:"):
        header, _, payload = url.partition(",")
        if not header.endswith(";base64"):
            return None
        mime, data, url = header[5:-7] or None, payload, None
    try:
        from deepeval.test_case import MLLMImage

        if isinstance(data, str) and data and isinstance(mime, str) and mime:
            return str(MLLMImage(dataBase64=data, mimeType=mime))
        if isinstance(url, str) and url.startswith(("http://", "https://")) and not MLLMImage.is_local_path(url):
            return str(MLLMImage(url=url, local=False))
    except (ImportError, ValueError, TypeError, OSError, AssertionError):
        return None
    return None
