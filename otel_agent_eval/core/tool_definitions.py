"""The tools spans say an agent had: names, descriptions and argument schemas, as each convention writes them.

A model call's span may declare the tools offered to the model (GenAI `gen_ai.tool.definitions`, the
Vercel AI SDK's `ai.prompt.tools`, OpenInference's flattened `llm.tools.N.tool.json_schema`); an agent
span may list its tools by name (strands' `gen_ai.agent.tools`); a tool span may describe its own tool
(`gen_ai.tool.description`, OpenInference `tool.description`). The tool-selection judge reads these
as deepeval's `available_tools`: what the agent could have chosen from.

    >>> found = {}
    >>> read_definitions({"gen_ai.tool.definitions": '[{"name": "search", "description": "Web search"}]'}, found)
    >>> found["search"].description
    'Web search'
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import conventions as c

__all__ = ["MAX_DEFINITION_CHARS", "ToolDefinition", "declared", "definitions_in", "read_definitions"]

MAX_DEFINITION_CHARS = 1_000_000  # a definitions attribute longer than this is not read
GEN_AI_TOOL_DEFINITIONS = "gen_ai.tool.definitions"
GEN_AI_TOOL_DESCRIPTION = "gen_ai.tool.description"
GEN_AI_AGENT_TOOLS = "gen_ai.agent.tools"  # strands-agents: the agent's tool names, a JSON list
OI_TOOL_DESCRIPTION = "tool.description"
VERCEL_PROMPT_TOOLS = "ai.prompt.tools"
_OI_LLM_TOOL = re.compile(r"llm\.tools\.\d+\.tool\.(json_schema|name)\Z")


@dataclass(frozen=True)
class ToolDefinition:
    """One tool as a span declared it; empty description and None schema when the span said nothing of them."""

    name: str
    description: str = ""
    schema: Mapping[str, Any] | None = None


def read_definitions(attrs: Mapping[str, Any], out: dict[str, ToolDefinition]) -> None:
    """Add the tools `attrs` declare to `out` (name -> definition); the first description and schema seen win.

    Never raises on bad values: a definition that cannot be read is skipped.
    """
    description = attrs.get(GEN_AI_TOOL_DESCRIPTION) or attrs.get(OI_TOOL_DESCRIPTION)
    if isinstance(description, str) and description.strip():
        name = attrs.get(c.GEN_AI_TOOL_NAME) or attrs.get(c.OI_TOOL_NAME)
        if isinstance(name, str) and name:
            _remember(out, name, description, None)
    for key in (GEN_AI_TOOL_DEFINITIONS, VERCEL_PROMPT_TOOLS):
        value = attrs.get(key)
        if value is not None:
            for definition in definitions_in(value):
                _remember_definition(out, definition)
    names = attrs.get(GEN_AI_AGENT_TOOLS)
    if names is not None:
        for item in _names(names):
            _remember(out, item, "", None)
    if any(_OI_LLM_TOOL.match(k) for k in attrs):
        for key in sorted(k for k in attrs if _OI_LLM_TOOL.match(k)):
            if key.endswith(".name"):
                if isinstance(attrs[key], str) and attrs[key]:
                    _remember(out, attrs[key], "", None)
                continue
            for definition in definitions_in(attrs[key]):
                _remember_definition(out, definition)


def definitions_in(value: Any) -> list[Mapping[str, Any]]:
    """Tool definitions from an attribute: a JSON list of them, one of them, or a list of JSON strings (Vercel)."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    found: list[Mapping[str, Any]] = []
    for item in items:
        if isinstance(item, str):
            if len(item) > MAX_DEFINITION_CHARS:
                continue
            try:
                item = json.loads(item)
            except (ValueError, RecursionError):
                continue
        for definition in item if isinstance(item, list) else [item]:
            if isinstance(definition, Mapping):
                found.append(definition)
    return found


def _names(value: Any) -> list[str]:
    """Tool names from a list attribute or a JSON list of names (strands writes `'["a", "b"]'`)."""
    if isinstance(value, str):
        if len(value) > MAX_DEFINITION_CHARS:
            return []
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return []
    if not isinstance(value, (list, tuple)):
        return []
    return [item for item in value if isinstance(item, str) and item]


def declared(definition: Mapping[str, Any]) -> tuple[str, str, Mapping[str, Any] | None] | None:
    """A definition's tool name, description ("" when none) and input schema (None when none), or None without a name."""
    inner = definition.get("function")  # OpenAI's {"type": "function", "function": {...}}
    if isinstance(inner, Mapping):
        definition = inner
    name = definition.get("name")
    if not isinstance(name, str) or not name:
        return None
    description = definition.get("description")
    schema = next((definition[k] for k in ("parameters", "inputSchema", "input_schema")
                   if isinstance(definition.get(k), Mapping)), None)
    if isinstance(schema, Mapping) and isinstance(schema.get("jsonSchema"), Mapping):
        schema = schema["jsonSchema"]  # the AI SDK's wrapped schema
    return name, description if isinstance(description, str) else "", schema


def _remember_definition(out: dict[str, ToolDefinition], definition: Mapping[str, Any]) -> None:
    found = declared(definition)
    if found is not None:
        _remember(out, *found)


def _remember(out: dict[str, ToolDefinition], name: str, description: str, schema: Mapping[str, Any] | None) -> None:
    old = out.get(name)
    if old is None:
        out[name] = ToolDefinition(name, description.strip(), schema)
    elif (not old.description and description.strip()) or (old.schema is None and schema is not None):
        out[name] = ToolDefinition(name, old.description or description.strip(),
                                   old.schema if old.schema is not None else schema)
