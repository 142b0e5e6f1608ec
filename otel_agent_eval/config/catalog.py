"""The tool catalog: what each tool costs, how fast it should be, what it can do.

A catalog is a YAML file validated against `CATALOG_SCHEMA` and then checked for
meaning (weights summing to 1, tasks naming known tools, ...). Every problem is
reported as one `CatalogError` naming the file, the line, the path inside the
file and what is wrong, so a broken catalog never shows up as a traceback.

    >>> catalog = load_catalog()          # the packaged default
    >>> catalog.tool("basic_calculator").cost_usd
    0.0
"""
from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Union

import yaml

COMPLEXITY_TIERS = ("simple", "moderate", "advanced")
ENVIRONMENTS = ("development", "staging", "production")
DEFAULT_CATALOG_NAME = "default_catalog.yaml"

# Built in, so a user catalog may list only its tools. A catalog's own entries win.
BUILTIN_PROFILES: dict[str, dict[str, float]] = {
    "balanced": {"cost_weight": 0.5, "latency_weight": 0.5},
    "cost_critical": {"cost_weight": 0.8, "latency_weight": 0.2},
    "latency_critical": {"cost_weight": 0.2, "latency_weight": 0.8},
}
# Seed article, "Threshold Strategies": lenient in development, strict in production.
BUILTIN_THRESHOLDS: dict[str, dict[str, float]] = {
    "development": {"warn": 0.7, "fail": 0.6},
    "staging": {"warn": 0.85, "fail": 0.75},
    "production": {"warn": 0.95, "fail": 0.85},
}

PathLike = Union[str, "os.PathLike[str]"]


class CatalogError(ValueError):
    """A catalog that cannot be used, with where and why in one line."""

    def __init__(self, source: str, path: str, problem: str, line: int | None = None) -> None:
        self.source, self.path, self.problem, self.line = source, path, problem, line
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {path + ': ' if path else ''}{problem}")


_NUMBER = {"type": "number", "minimum": 0}
_NAMES = {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True}
_WEIGHT = {"type": "number", "minimum": 0, "maximum": 1}
_SCORE = {"type": "number", "minimum": 0, "maximum": 1}
_MATCH_VALUE = {"anyOf": [{"type": ["string", "number", "boolean"]}, {"type": "array", "items": {"type": ["string", "number", "boolean"]}, "minItems": 1}]}

CATALOG_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "otel-agent-eval tool catalog",
    "type": "object",
    "additionalProperties": False,
    "required": ["tools"],
    "properties": {
        "version": {"const": 1},
        "default_profile": {"type": "string"},
        "default_environment": {"type": "string"},
        "tools": {
            "type": "object",
            "minProperties": 1,
            "description": "Tools by name, as they appear in gen_ai.tool.name / tool.name.",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["cost_usd", "latency_ms", "capabilities", "complexity"],
                "properties": {
                    "description": {"type": "string"},
                    "cost_usd": {**_NUMBER, "description": "Cost of one call in USD."},
                    "latency_ms": {**_NUMBER, "description": "Expected latency of one call."},
                    "latency_slo_ms": {"type": "number", "exclusiveMinimum": 0},
                    "capabilities": {**_NAMES, "minItems": 1},
                    "complexity": {"enum": list(COMPLEXITY_TIERS)},
                    "aliases": _NAMES,
                    "parameters": {"type": "object", "description": "JSON Schema of the arguments."},
                },
            },
        },
        "profiles": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["cost_weight", "latency_weight"],
                "properties": {"cost_weight": _WEIGHT, "latency_weight": _WEIGHT, "description": {"type": "string"}},
            },
        },
        "thresholds": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["warn", "fail"],
                "properties": {"warn": _SCORE, "fail": _SCORE},
            },
        },
        "tasks": {
            "type": "object",
            "description": "Task routes, tried in order; the first whose `match` fits a span wins.",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["capability"],
                "properties": {
                    "description": {"type": "string"},
                    "match": {
                        "type": "object",
                        "description": "Span or resource attribute -> exact value or glob; all must fit.",
                        "additionalProperties": _MATCH_VALUE,
                    },
                    "capability": {"type": "string", "minLength": 1},
                    "complexity": {"enum": list(COMPLEXITY_TIERS)},
                    "profile": {"type": "string"},
                    "optimal_tool": {"type": "string"},
                    "acceptable_tools": _NAMES,
                    "expected_tools": {"type": "array", "items": {"type": "string", "minLength": 1}},
                    "max_calls": {"type": "integer", "minimum": 1},
                },
            },
        },
        "models": {
            "type": "object",
            "description": "LLM prices in USD per 1k tokens, by gen_ai.request.model / gen_ai.response.model.",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["input_per_1k", "output_per_1k"],
                "properties": {"input_per_1k": _NUMBER, "output_per_1k": _NUMBER},
            },
        },
        "attribute_mapping": {
            "type": "object",
            "description": "In-house attribute names for tool spans that follow no public convention.",
            "additionalProperties": False,
            "required": ["tool_name"],
            "properties": {
                key: {"type": "string", "minLength": 1}
                for key in ("tool_name", "arguments", "result", "call_id", "agent_name")
            },
        },
    },
}


@dataclass(frozen=True)
class Tool:
    name: str
    cost_usd: float
    latency_ms: float
    capabilities: tuple[str, ...]
    complexity: str
    aliases: tuple[str, ...] = ()
    parameters: Mapping[str, Any] | None = None
    latency_slo_ms: float | None = None
    description: str = ""


@dataclass(frozen=True)
class Profile:
    name: str
    cost_weight: float
    latency_weight: float


@dataclass(frozen=True)
class Thresholds:
    """Scores at or above `warn` pass; below `fail` fail; in between warn."""

    environment: str
    warn: float
    fail: float

    def verdict(self, score: float) -> str:
        if score >= self.warn:
            return "pass"
        return "warn" if score >= self.fail else "fail"


@dataclass(frozen=True)
class TaskRoute:
    """Which task a span belongs to, and what good tool use looks like for it."""

    name: str
    capability: str
    match: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    complexity: str | None = None
    profile: str | None = None
    optimal_tool: str | None = None
    acceptable_tools: tuple[str, ...] = ()
    expected_tools: tuple[str, ...] = ()
    max_calls: int | None = None

    def matches(self, lookup: Callable[[str], Any]) -> bool:
        """True when every `match` key has a value, from `lookup`, that fits one pattern."""
        for key, patterns in self.match.items():
            value = lookup(key)
            if value is None:
                return False
            text = str(value)
            if not any(text == p or fnmatch.fnmatchcase(text, p) for p in patterns):
                return False
        return True


@dataclass(frozen=True)
class ModelPrice:
    input_per_1k: float
    output_per_1k: float


@dataclass(frozen=True)
class AttributeMapping:
    """Attribute names of an in-house tool-span convention; `tool_name` marks a tool span."""

    tool_name: str
    arguments: str | None = None
    result: str | None = None
    call_id: str | None = None
    agent_name: str | None = None


@dataclass(frozen=True)
class Catalog:
    tools: Mapping[str, Tool]
    profiles: Mapping[str, Profile]
    thresholds: Mapping[str, Thresholds]
    default_profile: str = "balanced"
    default_environment: str = "production"
    tasks: tuple[TaskRoute, ...] = ()
    models: Mapping[str, ModelPrice] = field(default_factory=dict)
    attribute_mapping: AttributeMapping | None = None
    source: str = "<memory>"
    _by_alias: Mapping[str, Tool] = field(default_factory=dict, repr=False, compare=False)

    def tool(self, name: str | None) -> Tool | None:
        """The tool called `name` or known by that alias, else None."""
        if name is None:
            return None
        return self.tools.get(name) or self._by_alias.get(name)

    def profile(self, name: str | None = None) -> Profile:
        return self.profiles[name or self.default_profile]

    def thresholds_for(self, environment: str | None = None) -> Thresholds:
        return self.thresholds[environment or self.default_environment]

    def task(self, name: str) -> TaskRoute | None:
        return next((t for t in self.tasks if t.name == name), None)

    def names(self) -> list[tuple[str, Tool]]:
        """Every name a tool answers to (its own and its aliases), with the tool."""
        return [*self.tools.items(), *((alias, t) for t in self.tools.values() for alias in t.aliases)]

    def tools_with(self, capability: str) -> list[Tool]:
        return [t for t in self.tools.values() if capability in t.capabilities]


def load_catalog(path: PathLike | None = None) -> Catalog:
    """Read and validate a catalog file; `None` loads the packaged default.

    Raises `CatalogError` (a `ValueError`) with one clear message on any problem.
    """
    if path is None:
        text = resources.files(__package__).joinpath(DEFAULT_CATALOG_NAME).read_text("utf-8")
        return parse_catalog(text, source=f"<packaged {DEFAULT_CATALOG_NAME}>")
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(source, "", f"cannot read the file: {exc.strerror or exc}") from None
    return parse_catalog(text, source=source)


def parse_catalog(text: str, *, source: str = "<string>") -> Catalog:
    """Validate catalog YAML text and build a `Catalog`."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise CatalogError(source, "", f"not valid YAML: {problem}", mark.line + 1 if mark else None) from None
    if not isinstance(data, dict):
        raise CatalogError(source, "", "expected a mapping with a `tools:` section at the top")
    try:
        _check_schema(data)
        return _build(data, source)
    except _Problem as p:
        raise CatalogError(source, ".".join(map(str, p.path)), p.problem, _line_of(text, p.path)) from None


class _Problem(Exception):
    def __init__(self, path: tuple[Any, ...], problem: str) -> None:
        self.path, self.problem = path, problem


def _check_schema(data: dict[str, Any]) -> None:
    from jsonschema import Draft202012Validator

    errors = sorted(Draft202012Validator(CATALOG_SCHEMA).iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if not errors:
        return
    error = errors[0]
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = error.schema.get("properties", {})
        unknown = sorted(k for k in error.instance if k not in allowed)
        if unknown and allowed:
            raise _Problem(path + (unknown[0],), f"unknown key; expected one of: {', '.join(allowed)}")
    raise _Problem(path, _MESSAGES.get(error.validator, lambda e: e.message)(error))


_MESSAGES: dict[str, Callable[[Any], str]] = {
    "required": lambda e: e.message.replace("is a required property", "is required"),
    "minimum": lambda e: f"must be >= {e.validator_value} (got {e.instance!r})",
    "maximum": lambda e: f"must be <= {e.validator_value} (got {e.instance!r})",
    "exclusiveMinimum": lambda e: f"must be > {e.validator_value} (got {e.instance!r})",
    "type": lambda e: f"must be of type {e.validator_value} (got {e.instance!r})",
    "enum": lambda e: f"must be one of {', '.join(map(str, e.validator_value))} (got {e.instance!r})",
}


def _build(data: dict[str, Any], source: str) -> Catalog:
    tools: dict[str, Tool] = {}
    by_alias: dict[str, Tool] = {}
    for name, spec in data["tools"].items():
        if spec.get("parameters") is not None:
            _check_parameters_schema(("tools", name, "parameters"), spec["parameters"])
        tool = Tool(
            name=name,
            cost_usd=float(spec["cost_usd"]),
            latency_ms=float(spec["latency_ms"]),
            capabilities=tuple(spec["capabilities"]),
            complexity=spec["complexity"],
            aliases=tuple(spec.get("aliases", ())),
            parameters=spec.get("parameters"),
            latency_slo_ms=spec.get("latency_slo_ms"),
            description=spec.get("description", ""),
        )
        tools[name] = tool
    for tool in tools.values():
        for alias in tool.aliases:
            other = tools.get(alias) or by_alias.get(alias)
            if other is not None and other is not tool:
                raise _Problem(("tools", tool.name, "aliases"), f"alias {alias!r} is already the name or an alias of tool {other.name!r}")
            by_alias[alias] = tool

    profiles = {n: Profile(n, float(p["cost_weight"]), float(p["latency_weight"])) for n, p in {**BUILTIN_PROFILES, **data.get("profiles", {})}.items()}
    for name, p in profiles.items():
        if not math.isclose(p.cost_weight + p.latency_weight, 1.0, abs_tol=1e-9):
            raise _Problem(("profiles", name), f"cost_weight + latency_weight must sum to 1 (got {p.cost_weight} + {p.latency_weight} = {p.cost_weight + p.latency_weight:g})")
    thresholds = {n: Thresholds(n, float(t["warn"]), float(t["fail"])) for n, t in {**BUILTIN_THRESHOLDS, **data.get("thresholds", {})}.items()}
    for name, t in thresholds.items():
        if t.warn < t.fail:
            raise _Problem(("thresholds", name), f"warn ({t.warn}) must be at least fail ({t.fail})")
    default_profile = data.get("default_profile", "balanced")
    if default_profile not in profiles:
        raise _Problem(("default_profile",), f"unknown profile {default_profile!r}; known: {', '.join(profiles)}")
    default_environment = data.get("default_environment", "production")
    if default_environment not in thresholds:
        raise _Problem(("default_environment",), f"unknown environment {default_environment!r}; known: {', '.join(thresholds)}")

    def known_tool(path: tuple[Any, ...], name: str) -> str:
        tool = tools.get(name) or by_alias.get(name)
        if tool is None:
            raise _Problem(path, f"unknown tool {name!r}; known tools: {', '.join(tools)}")
        return tool.name

    tasks = []
    for name, spec in (data.get("tasks") or {}).items():
        at = ("tasks", name)
        capability = spec["capability"]
        if not any(capability in t.capabilities for t in tools.values()):
            raise _Problem(at + ("capability",), f"no tool in the catalog has capability {capability!r}")
        if spec.get("profile") is not None and spec["profile"] not in profiles:
            raise _Problem(at + ("profile",), f"unknown profile {spec['profile']!r}; known: {', '.join(profiles)}")
        optimal = spec.get("optimal_tool")
        tasks.append(
            TaskRoute(
                name=name,
                capability=capability,
                match={k: tuple(map(str, v)) if isinstance(v, list) else (str(v),) for k, v in (spec.get("match") or {}).items()},
                complexity=spec.get("complexity"),
                profile=spec.get("profile"),
                optimal_tool=known_tool(at + ("optimal_tool",), optimal) if optimal is not None else None,
                acceptable_tools=tuple(known_tool(at + ("acceptable_tools", i), n) for i, n in enumerate(spec.get("acceptable_tools", ()))),
                expected_tools=tuple(known_tool(at + ("expected_tools", i), n) for i, n in enumerate(spec.get("expected_tools", ()))),
                max_calls=spec.get("max_calls"),
            )
        )
    models = {n: ModelPrice(float(m["input_per_1k"]), float(m["output_per_1k"])) for n, m in (data.get("models") or {}).items()}
    mapping = AttributeMapping(**data["attribute_mapping"]) if data.get("attribute_mapping") else None
    return Catalog(
        tools=tools,
        profiles=profiles,
        thresholds=thresholds,
        default_profile=default_profile,
        default_environment=default_environment,
        tasks=tuple(tasks),
        models=models,
        attribute_mapping=mapping,
        source=source,
        _by_alias=by_alias,
    )


def _check_parameters_schema(path: tuple[Any, ...], schema: Mapping[str, Any]) -> None:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise _Problem(path + tuple(exc.absolute_path), f"not a valid JSON Schema: {exc.message}") from None


def _line_of(text: str, path: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest node along `path` in the YAML text, for messages."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = node.start_mark.line + 1 if node is not None else None
    for key in path:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == str(key)), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            break
    return line
