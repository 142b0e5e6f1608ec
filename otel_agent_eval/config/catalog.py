"""The tool catalog: what each tool costs, how fast it should be, what it can do.

A catalog is a YAML file validated against `CATALOG_SCHEMA` and then checked for
meaning (weights summing to 1, tasks naming known tools, ...). Every problem is
reported as one `CatalogError` naming the file, the line, the path inside the
file and what is wrong, so a broken catalog never shows up as a traceback.

A catalog lives inside other people's apps, so no file can crash, hang or slow their
start-up: only regular files are read (never a FIFO or a device), at most
`MAX_CATALOG_BYTES`; YAML nesting is limited to `MAX_CATALOG_DEPTH` levels and the
document to `MAX_CATALOG_NODES` values, counting each alias as a copy of what it names
(no "billion laughs"); duplicate keys, keys YAML does not read as text (`on`, `411`,
`null`) and numbers that are not finite (`.nan`, `.inf`) are refused; and no value is
quoted in a message at more than a few dozen characters.

    >>> catalog = load_catalog()          # the packaged default
    >>> catalog.tool("basic_calculator").cost_usd
    0.0
    >>> check_catalog("tools: {}\\n")       # every problem, in file order
    [CatalogError('<string>:1: tools: must have at least 1 entry')]
"""
from __future__ import annotations

import fnmatch
import math
import os
import re
import reprlib
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, NoReturn, Union

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import (AliasEvent, DocumentEndEvent, DocumentStartEvent, MappingEndEvent, MappingStartEvent, ScalarEvent,
                         SequenceEndEvent, SequenceStartEvent, StreamEndEvent, StreamStartEvent)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

COMPLEXITY_TIERS = ("simple", "moderate", "advanced")
ENVIRONMENTS = ("development", "staging", "production")
DEFAULT_CATALOG_NAME = "default_catalog.yaml"
# Framework-internal tools, no tool calls of the agent: smolagents' (and TinyAgent's) agents end every run by
# calling `final_answer`, google-adk's and llama-index's under any-agent by `final_output`; CrewAI hands work to
# another agent of the crew with its delegation tools (that agent's own calls are scored under its role). A
# catalog's own `ignore_tools` replaces this list (`ignore_tools: []` scores them all).
CREWAI_DELEGATION_TOOLS = ("Delegate work to coworker", "Ask question to coworker")
DEFAULT_IGNORE_TOOLS: frozenset[str] = frozenset({"final_answer", "final_output", *CREWAI_DELEGATION_TOOLS})
# How frameworks qualify a tool's name with its plugin or toolset: semantic-kernel `plugin-function`.
# A name the catalog does not know is looked up again without its qualifier (`support-local_index`
# is `local_index`); the qualifier is one word of letters, digits and `_`.
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9_]+-(.+)\Z")
# MCP tools qualified by their server: `server.tool`, and the Claude Agent SDK's `mcp__server__tool`.
_SERVER_QUALIFIED = re.compile(r"(?:mcp__[\w\-]+?__|.*\.)([^.]+)\Z")

MAX_CATALOG_BYTES = 8 * 2**20  # a 10,000-tool catalog is about 1 MiB
MAX_CATALOG_DEPTH = 64  # nesting levels, aliases expanded; the schema itself needs 5
MAX_CATALOG_NODES = 500_000  # values (keys included), aliases expanded; 10,000 tools are 110,000 to 150,000
MAX_QUOTED_CHARS = 60  # the longest value quoted in a message
MAX_MESSAGE_CHARS = 500

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

# The CI gate's metrics per agent and task (`otel-agent-eval score`), as a catalog's `gates` names them:
# metric -> (higher is better, largest meaningful level or None). The tutorial's CI/CD gate: a minimum for
# what should be high (task completion), a maximum for what should be low (latency, money).
GATE_LEVEL_METRICS: dict[str, tuple[bool, float | None, str]] = {
    "completion": (True, 1, "share of runs completed, 0-1"),
    "correctness": (True, 1, "mean tool correctness against the task's expected tools, 0-1"),
    "health": (True, 100, "mean run health, 0-100"),
    "wasted_per_run_usd": (False, None, "money spent over the catalog's optimal tools per run, USD"),
    "cost_per_run_usd": (False, None, "cost per run (tools and priced LLM tokens), USD"),
    "mean_latency_ms": (False, None, "mean run duration, ms"),
    "p95_latency_ms": (False, None, "95th percentile run duration, ms"),
}

PathLike = Union[str, "os.PathLike[str]"]


def qualifier_free(name: str) -> str | None:
    """The function part of a qualified tool name (`support-local_index`, `kb.local_index`,
    `mcp__kb__local_index` -> `local_index`), or None when unqualified."""
    return next(_unqualified(name), None)


def _unqualified(name: str) -> Iterator[str]:
    """The function parts a qualified name may stand for: plugin-qualified first, then server-qualified."""
    if "-" in name:
        qualified = _QUALIFIED_NAME.match(name)
        if qualified is not None:
            yield qualified.group(1)
    if "." in name or "__" in name:
        qualified = _SERVER_QUALIFIED.match(name)
        if qualified is not None:
            yield qualified.group(1)


class CatalogError(ValueError):
    """A catalog that cannot be used, with where and why in one line (of at most a few hundred characters)."""

    def __init__(self, source: str, path: str, problem: str, line: int | None = None) -> None:
        source, path, problem = _one_line(source, MAX_MESSAGE_CHARS), _one_line(path, 200), _one_line(problem, MAX_MESSAGE_CHARS)
        self.source, self.path, self.problem, self.line = source, path, problem, line
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {path + ': ' if path else ''}{problem}")

    def __repr__(self) -> str:
        return f"CatalogError({str(self)!r})"


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line(text: str, limit: int) -> str:
    """`text` with control characters escaped (so never a line break), cut to `limit` characters."""
    text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))
    return text if len(text) <= limit else text[:limit - 1] + "…"


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = MAX_QUOTED_CHARS
_REPR.maxlist = _REPR.maxdict = _REPR.maxset = _REPR.maxtuple = 4
_REPR.maxlevel = 2


def _q(value: Any) -> str:
    """`repr(value)`, short whatever the value (reprlib never walks more than a few items)."""
    text = _REPR.repr(value)
    return text if len(text) <= MAX_QUOTED_CHARS + 2 else text[:MAX_QUOTED_CHARS] + "…"


def _some(names: Any, limit: int = 10) -> str:
    """The first `limit` names, comma-separated, and how many more there are."""
    names = list(names)
    shown = ", ".join(_one_line(n, 40) for n in names[:limit])
    return shown if len(names) <= limit else f"{shown}, … ({len(names) - limit} more)"


_NUMBER = {"type": "number", "minimum": 0}
_NAMES = {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True}
_WEIGHT = {"type": "number", "minimum": 0, "maximum": 1}
_SCORE = {"type": "number", "minimum": 0, "maximum": 1}


def _gate_level(maximum: float | None) -> dict[str, Any]:
    """A number (the fail level) or {fail, warn}; `minimum`/`maximum` bind numbers only, `required` objects only."""
    number: dict[str, Any] = {"type": "number", "minimum": 0, **({"maximum": maximum} if maximum is not None else {})}
    return {**number, "type": ["number", "object"], "additionalProperties": False, "required": ["fail"],
            "properties": {"fail": number, "warn": number}}


_GATES = {
    "type": "object",
    "description": "CI gate levels of `otel-agent-eval score` in this environment, per agent and task: a number (the fail "
                   "level) or {fail, warn}; a minimum for completion, correctness and health, a maximum for money and "
                   "latency. Efficiency is gated at this environment's own warn and fail.",
    "additionalProperties": False,
    "properties": {"efficiency": {}, **{metric: _gate_level(top) for metric, (_, top, _) in GATE_LEVEL_METRICS.items()}},
}
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
                    "context_usd": {**_NUMBER, "description": "Measured: what one call's result costs the later "
                                         "model calls of its run as input tokens, in USD (docs/true-cost.md); "
                                         "ranks tools by their true cost, cost_usd + context_usd."},
                    "latency_ms": {**_NUMBER, "description": "Expected latency of one call."},
                    "latency_slo_ms": {"type": "number", "exclusiveMinimum": 0},
                    "capabilities": {**_NAMES, "minItems": 1},
                    "complexity": {"enum": list(COMPLEXITY_TIERS)},
                    "aliases": {**_NAMES, "description": "Other names the tool is called by (in spans and in task routes)."},
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
                "properties": {"warn": _SCORE, "fail": _SCORE, "gates": _GATES},
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
                "properties": {"input_per_1k": _NUMBER, "output_per_1k": _NUMBER,
                               "cached_input_per_1k": {**_NUMBER, "description": "Price of input tokens served from the "
                                                       "provider's cache (default: input_per_1k)."}},
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
        "ignore_tools": {
            **_NAMES,
            # derived from the constant, in a stable order (a frozenset's order changes with the hash seed)
            "description": "Framework-internal tools whose calls are not scored (default: "
                           f"{', '.join(repr(name) for name in sorted(DEFAULT_IGNORE_TOOLS))}; this list replaces it, "
                           "[] scores them all).",
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
    context_usd: float = 0.0  # measured: what a call's result costs the run's later model calls (docs/true-cost.md)

    @property
    def true_cost_usd(self) -> float:
        """What one call really costs: its price plus what its result costs the later model calls, as measured."""
        return self.cost_usd + self.context_usd


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
class GateLevel:
    """A catalog's CI gate level for one metric in one environment: past `fail` fails, past `warn` warns.

    "Past" is below for metrics where higher is better (completion), above for the others (latency).
    """

    metric: str
    fail: float
    warn: float | None = None
    higher_is_better: bool = True


def match_text(value: Any) -> str:
    """The text a route's `match` patterns are compared with: a string as is, an enum by its value."""
    return value if type(value) is str else str.__str__(value) if isinstance(value, str) else str(value)


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
            text = match_text(value)
            if not any(text == p or fnmatch.fnmatchcase(text, p) for p in patterns):
                return False
        return True


@dataclass(frozen=True)
class ModelPrice:
    input_per_1k: float
    output_per_1k: float
    cached_input_per_1k: float | None = None  # input tokens read from the provider's cache; None: input_per_1k

    @property
    def cached_per_1k(self) -> float:
        return self.input_per_1k if self.cached_input_per_1k is None else self.cached_input_per_1k


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
    ignore_tools: frozenset[str] = DEFAULT_IGNORE_TOOLS
    gates: Mapping[str, Mapping[str, GateLevel]] = field(default_factory=dict)  # environment -> metric -> level
    _by_alias: Mapping[str, Tool] = field(default_factory=dict, repr=False, compare=False)

    def tool(self, name: str | None) -> Tool | None:
        """The tool called `name` or known by that alias, else None.

        A qualified name that is neither is the tool its function part names: semantic-kernel's
        `plugin-function` (`support-local_index` is `local_index`), an MCP server's `server.tool` and
        `mcp__server__tool` (`mcp__docs__local_index`).
        """
        if name is None:
            return None
        tool = self.tools.get(name) or self._by_alias.get(name)
        if tool is None:
            for plain in _unqualified(name):
                tool = self.tools.get(plain) or self._by_alias.get(plain)
                if tool is not None:
                    break
        return tool

    def ignores(self, name: str | None) -> bool:
        """Whether calls of this tool are framework-internal, not scored (`ignore_tools`)."""
        return name is not None and name in self.ignore_tools

    def profile(self, name: str | None = None) -> Profile:
        return self.profiles[name or self.default_profile]

    def thresholds_for(self, environment: str | None = None) -> Thresholds:
        return self.thresholds[environment or self.default_environment]

    def gates_for(self, environment: str | None = None) -> Mapping[str, GateLevel]:
        """The CI gate levels the catalog declares for `environment` (default: its default environment), by metric."""
        return self.gates.get(environment or self.default_environment, {})

    def task(self, name: str) -> TaskRoute | None:
        return next((t for t in self.tasks if t.name == name), None)

    def names(self) -> list[tuple[str, Tool]]:
        """Every name a tool answers to (its own and its aliases), with the tool."""
        return [*self.tools.items(), *((alias, t) for t in self.tools.values() for alias in t.aliases)]

    def tools_with(self, capability: str) -> list[Tool]:
        return [t for t in self.tools.values() if capability in t.capabilities]

    def warnings(self) -> list[str]:
        """What is valid but probably not meant: a task whose complexity no capable tool has
        (without an `optimal_tool`, the best fit one tier off becomes its optimal pick), or an
        `optimal_tool` of another tier than its task (its own calls then score `optimal` and pass
        with efficiency scaled by the tier fit, down to 0.0)."""
        out = []
        for route in self.tasks:
            if route.complexity is None:
                continue
            if route.optimal_tool:
                named = self.tool(route.optimal_tool)
                if named is not None and named.complexity != route.complexity:
                    out.append(f"tasks.{route.name}: optimal_tool {named.name!r} is {named.complexity}, the task is "
                               f"{route.complexity}: its calls score optimal with efficiency scaled by the tier fit; "
                               f"set the task's complexity or another optimal_tool")
                continue
            capable = self.tools_with(route.capability)
            if capable and not any(t.complexity == route.complexity for t in capable):
                tiers = ", ".join(sorted({t.complexity for t in capable}))
                out.append(f"tasks.{route.name}: no tool with capability {route.capability!r} is {route.complexity} "
                           f"(they are {tiers}): the closest tier is picked as optimal; add a tool or set optimal_tool")
        return out


def load_catalog(path: PathLike | None = None) -> Catalog:
    """Read and validate a catalog file; `None` loads the packaged default.

    Raises `CatalogError` (a `ValueError`) with one clear message on any problem: the
    first in the file; `check_catalog` lists them all.
    """
    if path is None:
        text = resources.files(__package__).joinpath(DEFAULT_CATALOG_NAME).read_text("utf-8")
        return parse_catalog(text, source=f"<packaged {DEFAULT_CATALOG_NAME}>")
    return parse_catalog(read_catalog_text(path), source=os.fsdecode(path))


def parse_catalog(text: str, *, source: str = "<string>") -> Catalog:
    """Validate catalog YAML text and build a `Catalog`; raises the first problem as `CatalogError`."""
    catalog, problems = _check(text, source)
    if catalog is None:
        raise problems[0]
    return catalog


def check_catalog(text: str, source: str = "<string>") -> list[CatalogError]:
    """Every problem of catalog YAML text, in file order; `[]` when it is a valid catalog.

    A YAML syntax error or a refused limit ends the reading, so it comes alone; otherwise
    every bad key, value and reference is listed, each with its line.
    """
    return _check(text, source)[1]


def check_catalog_file(path: PathLike) -> tuple[Catalog | None, list[CatalogError]]:
    """The catalog in a file, or None and every problem of the file (what `catalog check` prints)."""
    try:
        text = read_catalog_text(path)
    except CatalogError as exc:
        return None, [exc]
    return _check(text, os.fsdecode(path))


def read_catalog_text(path: PathLike) -> str:
    """The text of a catalog file: a regular file of at most `MAX_CATALOG_BYTES` bytes of UTF-8.

    Never blocks on a FIFO or reads a device: the path is looked at before it is opened
    (non-blocking) and the opened file again, in case it was swapped in between.
    """
    source = os.fsdecode(path)

    def refuse(problem: str, line: int | None = None) -> CatalogError:
        return CatalogError(source, "", problem, line)

    try:
        _regular(os.stat(path), refuse)
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
        fd = os.open(path, flags)
        with open(fd, "rb") as f:  # closes fd, whatever happens
            _regular(os.fstat(fd), refuse)
            data = f.read(MAX_CATALOG_BYTES + 1)
    except OSError as exc:
        raise refuse(f"cannot read the file: {exc.strerror or exc}") from None
    if len(data) > MAX_CATALOG_BYTES:
        raise refuse(f"too large: over {MAX_CATALOG_BYTES:,} bytes (MAX_CATALOG_BYTES)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise refuse(f"not UTF-8 text: byte 0x{data[exc.start]:02x} in column {column}; save the file as UTF-8", line) from None


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _regular(st: os.stat_result, refuse: Callable[[str], CatalogError]) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _FILE_KINDS if test(st.st_mode)), "not a file")
        raise refuse(f"not a regular file ({kind}); a catalog must be a plain YAML file")
    if st.st_size > MAX_CATALOG_BYTES:
        raise refuse(f"too large: {st.st_size:,} bytes; the limit is {MAX_CATALOG_BYTES:,} (MAX_CATALOG_BYTES)")


class _Problem(Exception):
    def __init__(self, path: tuple[Any, ...], problem: str, line: int | None = None) -> None:
        self.path, self.problem, self.line = path, problem, line


def _check(text: str, source: str) -> tuple[Catalog | None, list[CatalogError]]:
    """The catalog, or None and every problem (at least one), in file order."""
    def error(path: tuple[Any, ...], problem: str, line: int | None) -> CatalogError:
        return CatalogError(source, ".".join(map(str, path)), problem, line)

    try:
        data = _plain_data(text)  # the common case, fast; any doubt and the exact path below reads it again
        if data is not None and not _check_schema(data) and not _meaning(data, set()):
            return _build(data, source), []
        try:
            root, data, problems = _parse_yaml(text)
        except _Problem as p:
            return None, [error(p.path, p.problem, p.line)]
        if not isinstance(data, dict):
            return None, [error((), "expected a mapping with a `tools:` section at the top", None)]
        told = {p.path for p in problems}  # by the loader: the schema would only say it again
        schema = [p for p in _check_schema(data) if p.path not in told]
        problems += schema
        problems += _meaning(data, {p.path[:2] for p in problems})
        if not problems:
            return _build(data, source), []
        lines = _Lines(root)
        errors: dict[str, CatalogError] = {}
        for p in problems:
            line, node = (p.line, None) if p.line is not None else lines.node(p.path)
            if p.problem.startswith("must be of type string") and isinstance(node, ScalarNode) and node.tag in _READ_AS:
                shown = _one_line(node.value, MAX_QUOTED_CHARS)
                p.problem = f'must be text, but YAML reads {shown} as {_READ_AS[node.tag]}; put it in quotes: "{shown}"'
            elif p.problem.startswith("must be of type number") and isinstance(node, ScalarNode) and not node.style:
                written = _yaml_float(node.value)
                if written is not None:
                    p.problem = (f"must be a number, but YAML reads {node.value} as text (its floats need a dot and a "
                                 f"signed exponent): write {written}")
            e = error(p.path, p.problem, line)
            errors.setdefault(str(e), e)
        return None, sorted(errors.values(), key=lambda e: e.line or 0)
    except Exception as exc:  # noqa: BLE001 - a bug here must not take the app down: it is one more bad catalog
        return None, [error((), f"could not be checked: internal error {type(exc).__name__}: {_q(str(exc))}", None)]


_EXPONENT_FORM = re.compile(r"([-+]?)(\d*)(?:\.(\d*))?[eE]([-+]?)(\d+)")


def _yaml_float(text: str) -> str | None:
    """`1e308` as YAML 1.1 reads it as a float (`1.0e+308`), or None when `text` is no number in exponent form."""
    m = _EXPONENT_FORM.fullmatch(text)
    if m is None or not (m[2] or m[3]):
        return None
    sign, whole, fraction, exponent_sign, exponent = m.groups()
    return f"{sign}{whole or 0}.{fraction or 0}e{exponent_sign or '+'}{exponent}"


# -- YAML, within limits -----------------------------------------------------------------

_STR, _INT, _FLOAT = "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_KEY_TAGS = frozenset({_STR, "tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"})
_SURE: dict[str, Callable[[str], Any]] = {  # values the constructor surely builds, finite: no need to build them twice
    _INT: re.compile(r"[-+]?(?:0|[1-9][0-9]{0,299})\Z").match,
    _FLOAT: re.compile(r"[-+]?(?:[0-9][0-9_]{0,299}\.[0-9_]{0,300}|\.[0-9][0-9_]{0,299})\Z").match,
    "tag:yaml.org,2002:bool": lambda v: v.lower() in SafeConstructor.bool_values,
    "tag:yaml.org,2002:null": frozenset({"", "~", "null", "Null", "NULL"}).__contains__,
}
_READ_AS = {_INT: "a number", _FLOAT: "a number", "tag:yaml.org,2002:bool": "true/false",
            "tag:yaml.org,2002:null": "null (no value)", "tag:yaml.org,2002:timestamp": "a date"}


class _Limits(Composer):
    """A composer that refuses what would crash, hang or slow the app, and notes what YAML gets silently wrong.

    Refused at once (`_Problem`): nesting deeper than `MAX_CATALOG_DEPTH`, more than
    `MAX_CATALOG_NODES` values (an alias counts as a copy of what it names, so the
    depth and size are those of the data built), an alias inside what it names, a key
    that is a list or mapping. Noted, with path and line (`self.problems`): duplicate
    keys, keys YAML reads as something other than text (kept as their text, so the rest
    can be checked), values YAML cannot build and numbers that are not finite.

    Composer's compose_* methods, in one loop-friendly piece (this runs once per value);
    path resolvers, which catalogs do not use, are not consulted.
    """

    def __init__(self) -> None:
        Composer.__init__(self)
        self.problems: list[_Problem] = []
        self._path: list[Any] = []
        self._depth = self._deepest = self._nodes = 0
        self._extent: dict[str, tuple[int, int]] = {}  # anchor -> (values, levels) of what it names

    def _where(self, step: Any) -> tuple[Any, ...]:
        return (*self._path, step) if step is not None else tuple(self._path)

    def _refuse(self, depth: int, event: Any, step: Any, alias: str | None = None) -> NoReturn:
        expanded = f" once alias *{_one_line(alias, 40)} is expanded" if alias else ""
        path = self._where(step)
        path = path[:6] + (("…",) if len(path) > 6 else ())
        if depth > MAX_CATALOG_DEPTH:
            raise _Problem(path, f"nested deeper than {MAX_CATALOG_DEPTH} levels{expanded} (MAX_CATALOG_DEPTH)", event.start_mark.line + 1)
        raise _Problem(path, f"more than {MAX_CATALOG_NODES:,} values{expanded or ', aliases expanded'} (MAX_CATALOG_NODES)", event.start_mark.line + 1)

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        depth = self._depth + 1
        step = index if index.__class__ is int else index.value if index.__class__ is ScalarNode else None
        if event.__class__ is AliasEvent:
            self.get_event()
            if event.anchor not in self.anchors:
                raise _Problem(self._where(step), f"alias *{_one_line(event.anchor, 40)} names no anchor (&name) above it", event.start_mark.line + 1)
            if event.anchor not in self._extent:
                raise _Problem(self._where(step), f"alias *{_one_line(event.anchor, 40)} is used inside the value it names", event.start_mark.line + 1)
            nodes, levels = self._extent[event.anchor]
            self._nodes += nodes
            deepest = depth + levels - 1
            if deepest > MAX_CATALOG_DEPTH or self._nodes > MAX_CATALOG_NODES:
                self._refuse(deepest, event, step, event.anchor)
            if deepest > self._deepest:
                self._deepest = deepest
            return self.anchors[event.anchor]
        self._nodes += 1
        if depth > MAX_CATALOG_DEPTH or self._nodes > MAX_CATALOG_NODES:
            self._refuse(depth, event, step)
        if depth > self._deepest:
            self._deepest = depth
        anchor = event.anchor
        if anchor is not None:
            if anchor in self.anchors:
                first = self.anchors[anchor].start_mark.line + 1
                raise _Problem(self._where(step), f"anchor &{_one_line(anchor, 40)} is defined twice (first on line {first})", event.start_mark.line + 1)
            outer_nodes, outer_deepest, self._deepest = self._nodes - 1, self._deepest, depth
        if event.__class__ is ScalarEvent:
            self.get_event()
            tag = event.tag
            if tag is None or tag == "!":
                tag = self.resolve(ScalarNode, event.value, event.implicit)
            node: Node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
            if anchor is not None:
                self.anchors[anchor] = node
            if tag != _STR and step is not None and not (tag in _SURE and _SURE[tag](event.value)):
                self._check_scalar(node, (*self._path, step))
        else:
            if step is not None:
                self._path.append(step)
            self._depth = depth
            node = self._compose_sequence(event, anchor) if event.__class__ is SequenceStartEvent else self._compose_mapping(event, anchor)
            self._depth = depth - 1
            if step is not None:
                self._path.pop()
        if anchor is not None:
            self._extent[anchor] = (self._nodes - outer_nodes, self._deepest - depth + 1)
            self._deepest = max(outer_deepest, self._deepest)
        return node

    def _compose_sequence(self, start: Any, anchor: str | None) -> SequenceNode:
        self.get_event()
        tag = start.tag
        if tag is None or tag == "!":
            tag = self.resolve(SequenceNode, None, start.implicit)
        node = SequenceNode(tag, [], start.start_mark, None, flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        items = node.value
        while self.peek_event().__class__ is not SequenceEndEvent:
            items.append(self.compose_node(node, len(items)))
        node.end_mark = self.get_event().end_mark
        return node

    def _compose_mapping(self, start: Any, anchor: str | None) -> MappingNode:
        self.get_event()
        tag = start.tag
        if tag is None or tag == "!":
            tag = self.resolve(MappingNode, None, start.implicit)
        node = MappingNode(tag, [], start.start_mark, None, flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        pairs = node.value
        first_line: dict[str, int] = {}
        while self.peek_event().__class__ is not MappingEndEvent:
            key = self.compose_node(node, None)
            if key.__class__ is not ScalarNode:
                raise _Problem(tuple(self._path), "a key must be a name, not a list or mapping", key.start_mark.line + 1)
            if key.tag != _STR:
                self._check_key(key)
            if key.tag == _STR:
                if key.value in first_line:
                    self.problems.append(_Problem((*self._path, key.value), f"duplicate key (first on line {first_line[key.value]}); "
                                                                          "YAML would silently keep only the last one", key.start_mark.line + 1))
                else:
                    first_line[key.value] = key.start_mark.line + 1
            pairs.append((key, self.compose_node(node, key)))
        node.end_mark = self.get_event().end_mark
        return node

    def _check_key(self, key: ScalarNode) -> None:
        if key.tag in _KEY_TAGS:
            return  # `<<` (merge) and `=` (value)
        read_as = _READ_AS.get(key.tag, f"tag {key.tag}")
        text = _one_line(key.value, MAX_QUOTED_CHARS)
        self.problems.append(_Problem((*self._path, key.value), f"the name {text or '(empty)'} is read by YAML as {read_as}, "
                                                              f'not as text; put it in quotes: "{text}"', key.start_mark.line + 1))
        key.tag = _STR  # checked on as the text it was meant to be

    def _check_scalar(self, node: ScalarNode, path: tuple[Any, ...]) -> None:
        """Build a non-text value now (the constructor keeps it): one YAML cannot build or that is not finite is noted."""
        try:
            value = self.construct_object(node)  # type: ignore[attr-defined]
        except (RecursionError, MemoryError):
            raise
        except Exception as exc:  # noqa: BLE001 - `!!int x`, `2024-13-45`, 5,000 digits, `!!bool maybe`, `!mine x`: noted, read on as text
            self.recursive_objects.pop(node, None)  # type: ignore[attr-defined]
            if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
                problem = f"cannot be read: {exc.problem}"
            else:
                problem = f"cannot be read as {_READ_AS.get(node.tag, f'tag {node.tag}').split(' (')[0]}"
            self.problems.append(_Problem(path, f"{problem} (got {_one_line(node.value, MAX_QUOTED_CHARS)})", node.start_mark.line + 1))
            node.tag = _STR
            return
        if type(value) in (int, float) and not abs(value) <= sys.float_info.max:
            self.problems.append(_Problem(path, f"must be a finite number (got {_one_line(node.value, MAX_QUOTED_CHARS)})", node.start_mark.line + 1))


class _SafeLimitedLoader(Reader, Scanner, Parser, _Limits, SafeConstructor, Resolver):
    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        _Limits.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)


_CParser: Any = None
try:  # libyaml parses ~10x faster; composing (where the limits are) stays in Python, in _Limits
    from yaml._yaml import CParser

    _CParser = CParser

    class _CSafeLimitedLoader(_Limits, CParser, SafeConstructor, Resolver):  # _Limits first: its compose_* win
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _Limits.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    _LOADER: type = _CSafeLimitedLoader
except ImportError:
    _LOADER = _SafeLimitedLoader


_NO_KEY, _UNSEEN, _NOT_PLAIN = object(), object(), object()
_PLAIN_TAGS = frozenset({_STR, _INT, _FLOAT, "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null"})


def _plain_data(text: str) -> Any:
    """The data of a plainly written catalog, read straight from libyaml's events; None at the first doubt.

    Composing nodes in Python (`_Limits`) costs seconds for 10,000 tools, and line numbers are
    only needed for a message. So this reads the common case, a single mapping of text keys
    and text, number, true/false and null values, with no node objects; at anything else (an
    anchor, alias or tag, a key that is not text or comes twice, a value YAML cannot build or
    that is not finite, a limit reached, a YAML error) it gives up and `_parse_yaml` reads the
    text again, exactly as before, to refuse it or note the problem with its line.
    """
    if _CParser is None or len(text) > MAX_CATALOG_BYTES or Reader.NON_PRINTABLE.search(text):
        return None
    parser, resolve, constructor = _CParser(text), Resolver().resolve, SafeConstructor()
    get = parser.get_event
    values: dict[str, Any] = {}  # plain scalar text -> what YAML reads it as (or _NOT_PLAIN): the same everywhere
    stack: list[Any] = []  # the open mappings and lists, innermost last
    key: Any = _NO_KEY  # the innermost mapping's key waiting for its value
    root: Any = None
    nodes = 0
    try:
        if get().__class__ is not StreamStartEvent or get().__class__ is not DocumentStartEvent:
            return None
        while True:
            event = get()
            kind = event.__class__
            if kind is MappingEndEvent or kind is SequenceEndEvent:
                stack.pop()
                if not stack:
                    break
                continue
            if kind is not ScalarEvent and kind is not MappingStartEvent and kind is not SequenceStartEvent:
                return None  # an alias
            nodes += 1  # counted and nested as _Limits does: a key is a value one level down
            if event.anchor is not None or event.tag is not None or len(stack) >= MAX_CATALOG_DEPTH or nodes > MAX_CATALOG_NODES:
                return None
            if kind is ScalarEvent:
                value = event.value
                if event.implicit[0]:  # plain: YAML decides what it is; quoted and block scalars are text
                    value = values.get(value, _UNSEEN)
                    if value is _UNSEEN:
                        value = values[event.value] = _plain_value(event.value, resolve, constructor)
                    if value is _NOT_PLAIN:
                        return None
            else:
                value = {} if kind is MappingStartEvent else []
            if not stack:
                if kind is not MappingStartEvent:
                    return None  # the exact path says what is wrong
                root = value
            elif stack[-1].__class__ is list:
                stack[-1].append(value)
            elif key is not _NO_KEY:
                stack[-1][key] = value  # in key order, as the constructor fills a mapping
                key = _NO_KEY
            elif value.__class__ is str and value not in stack[-1]:
                key = value
            else:
                return None  # a key that is not text, or a duplicate
            if kind is not ScalarEvent:
                stack.append(value)
        if get().__class__ is not DocumentEndEvent or get().__class__ is not StreamEndEvent:
            return None  # more than one document
    except yaml.YAMLError:
        return None
    finally:
        parser.dispose()
    return root


def _plain_value(text: str, resolve: Callable[..., str], constructor: SafeConstructor) -> Any:
    """What YAML reads a plain scalar as, if text, a finite number, true/false or null; else _NOT_PLAIN."""
    tag = resolve(ScalarNode, text, (True, False))
    if tag == _STR:
        return text
    if tag not in _PLAIN_TAGS:
        return _NOT_PLAIN  # a date, `<<`, `=`: the exact path builds or notes them
    try:
        value = _LOADER.yaml_constructors[tag](constructor, ScalarNode(tag, text))
    except Exception:  # noqa: BLE001 - `0x` + 300 digits, 5,000 digits: _Limits notes it
        return _NOT_PLAIN
    return value if type(value) not in (int, float) or abs(value) <= sys.float_info.max else _NOT_PLAIN


def _parse_yaml(text: str) -> tuple[Node | None, Any, list[_Problem]]:
    """The root node, the data and the noted problems of YAML text; raises `_Problem` for unreadable YAML."""
    if len(text) > MAX_CATALOG_BYTES:
        raise _Problem((), f"too large: over {MAX_CATALOG_BYTES:,} characters (MAX_CATALOG_BYTES)")
    bad = Reader.NON_PRINTABLE.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        raise _Problem((), f"not valid YAML: character U+{ord(bad.group()):04X} in column {column} is not allowed", line)
    try:
        return _parse_with(_LOADER, text)
    except _Problem as problem:
        if _LOADER is _SafeLimitedLoader or "maximum nesting depth" not in problem.problem:
            raise
    # libyaml >= 0.2.5 (PyYAML 6.0.4's wheels) caps nesting at 1,000 levels while it scans ahead, before
    # _Limits sees a value; the Python scanner does not, so _Limits refuses with the path and our limit.
    return _parse_with(_SafeLimitedLoader, text)


def _parse_with(loader_type: type, text: str) -> tuple[Node | None, Any, list[_Problem]]:
    loader = loader_type(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = ", ".join(filter(None, (exc.context, exc.problem))) or type(exc).__name__
        raise _Problem((), f"not valid YAML: {what}", mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:  # ReaderError and the like: no mark, the reason is enough
        raise _Problem((), f"not valid YAML: {getattr(exc, 'reason', None) or type(exc).__name__}") from None
    except (_Problem, RecursionError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - a constructor's own error, e.g. `!!bool maybe` as a key
        raise _Problem((), f"not valid YAML: a value cannot be read ({type(exc).__name__}: {_q(str(exc))})") from None
    finally:
        loader.dispose()
    return root, data, loader.problems


class _Lines:
    """Line of a path's node (its key's line for a mapping value), looked up in the composed nodes."""

    def __init__(self, root: Node | None) -> None:
        self.root = root
        self._keys: dict[int, dict[str, tuple[Node, Node]]] = {}

    def node(self, path: tuple[Any, ...]) -> tuple[int | None, Node | None]:
        """(line, node) of `path`; the node is None when the path goes further than the nodes."""
        node = self.root
        line = node.start_mark.line + 1 if node is not None else None
        for key in path:
            if isinstance(node, MappingNode):
                keys = self._keys.get(id(node))
                if keys is None:  # the last of equal keys wins, as in the data
                    keys = self._keys[id(node)] = {k.value: (k, v) for k, v in node.value if isinstance(k, ScalarNode)}
                if str(key) not in keys:
                    return line, None
                k, node = keys[str(key)]
                line = k.start_mark.line + 1
            elif isinstance(node, SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
                node = node.value[key]
                line = node.start_mark.line + 1
            else:
                return line, None
        return line, node

    def line(self, path: tuple[Any, ...]) -> int | None:
        return self.node(path)[0]


# -- the schema ------------------------------------------------------------------------------

def _check_schema(data: dict[str, Any]) -> list[_Problem]:
    from jsonschema import Draft202012Validator

    tools = data.get("tools")
    if isinstance(tools, dict) and tools and all(tool_entry_ok(entry) for entry in tools.values()):
        # Every tool entry passed the exact hand check: jsonschema looks at the rest (a catalog
        # of 10,000 tools would cost it seconds), with one valid stand-in so `tools` is not empty.
        data = {**data, "tools": {"_": _VALID_TOOL}}
    problems = []
    for error in Draft202012Validator(CATALOG_SCHEMA).iter_errors(data):
        path = tuple(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = error.schema.get("properties", {})
            for key in (k for k in error.instance if k not in allowed):
                problems.append(_Problem(path + (key,), f"unknown key; expected one of: {', '.join(allowed)}" if allowed else "unknown key"))
        else:
            problems.append(_Problem(path, _MESSAGES.get(error.validator, _other_rule)(error)))
    return problems


_VALID_TOOL = {"cost_usd": 0, "latency_ms": 0, "capabilities": ["_"], "complexity": COMPLEXITY_TIERS[0]}
_TOOL_KEYS = frozenset(CATALOG_SCHEMA["properties"]["tools"]["additionalProperties"]["properties"])
_TOOL_REQUIRED = frozenset(CATALOG_SCHEMA["properties"]["tools"]["additionalProperties"]["required"])


def tool_entry_ok(entry: Any) -> bool:
    """Exactly what the catalog schema accepts as one tool entry (a property test holds the two together)."""
    if type(entry) is not dict or not _TOOL_KEYS.issuperset(entry) or not _TOOL_REQUIRED.issubset(entry):
        return False
    number = lambda v: type(v) in (int, float)  # noqa: E731 - JSON Schema numbers: no bool
    names = lambda v: type(v) is list and all(type(n) is str and n for n in v) and len(set(v)) == len(v)  # noqa: E731
    if not (number(entry["cost_usd"]) and not entry["cost_usd"] < 0 and number(entry["latency_ms"]) and not entry["latency_ms"] < 0):
        return False
    slo = entry.get("latency_slo_ms", 1)
    if not (number(slo) and not slo <= 0):
        return False
    context = entry.get("context_usd", 0)
    if not (number(context) and not context < 0):
        return False
    if not (names(entry["capabilities"]) and entry["capabilities"]) or not names(entry.get("aliases", [])):
        return False
    return (type(entry["complexity"]) is str and entry["complexity"] in COMPLEXITY_TIERS
            and type(entry.get("description", "")) is str and type(entry.get("parameters", {})) is dict)


def _type_message(e: Any) -> str:
    expected = e.validator_value if isinstance(e.validator_value, str) else " or ".join(e.validator_value)
    return f"must be of type {expected} (got {_q(e.instance)})"


def _other_rule(e: Any) -> str:  # never jsonschema's own message: it quotes the whole value
    return f"breaks the schema's {e.validator!r} rule (got {_q(e.instance)})"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word[:-1] + 'ies' if word.endswith('y') else word + 's'}"


_MESSAGES: dict[str, Callable[[Any], str]] = {
    "required": lambda e: _one_line(e.message.replace("is a required property", "is required"), 100),  # names a schema property
    "minimum": lambda e: f"must be >= {e.validator_value} (got {_q(e.instance)})",
    "maximum": lambda e: f"must be <= {e.validator_value} (got {_q(e.instance)})",
    "exclusiveMinimum": lambda e: f"must be > {e.validator_value} (got {_q(e.instance)})",
    "type": _type_message,
    "enum": lambda e: f"must be one of {', '.join(map(str, e.validator_value))} (got {_q(e.instance)})",
    "const": lambda e: f"must be {e.validator_value!r} (got {_q(e.instance)})",
    "minProperties": lambda e: f"must have at least {_plural(e.validator_value, 'entry')}",
    "minItems": lambda e: f"must have at least {_plural(e.validator_value, 'item')}",
    "minLength": lambda e: "must not be empty",
    "uniqueItems": lambda e: f"must not list an item twice (got {_q(e.instance)})",
    "anyOf": lambda e: f"must be text, a number, true/false or a list of them (got {_q(e.instance)})",
}


# -- meaning ------------------------------------------------------------------------------

def _number(v: Any) -> bool:
    """A JSON Schema number (no bool) that is finite."""
    return type(v) in (int, float) and abs(v) <= sys.float_info.max


def _meaning(data: dict[str, Any], bad: set[tuple[Any, ...]]) -> list[_Problem]:
    """What the schema cannot say: sums, orders and references. Looks only at what is well typed
    (the schema reports the rest) and skips entries the schema already faulted, so nothing is told twice."""
    problems: list[_Problem] = []
    tools = data.get("tools") if isinstance(data.get("tools"), dict) else {}
    specs = {name: spec for name, spec in tools.items() if isinstance(spec, dict)}
    known: dict[str, str] = {name: name for name in tools}  # names and aliases -> tool name
    capabilities: set[str] = set()
    for name, spec in specs.items():
        if isinstance(spec.get("capabilities"), list):
            capabilities.update(c for c in spec["capabilities"] if isinstance(c, str))
        if isinstance(spec.get("parameters"), dict):
            problems += _parameters_problems(("tools", name, "parameters"), spec["parameters"])
    for name, spec in specs.items():
        for alias in spec.get("aliases") if isinstance(spec.get("aliases"), list) else ():
            if not isinstance(alias, str):
                continue
            other = known.setdefault(alias, name)
            if other != name:
                problems.append(_Problem(("tools", name, "aliases"), f"alias {_q(alias)} is already the name or an alias of tool {_q(other)}"))
    ignored = data.get("ignore_tools") if isinstance(data.get("ignore_tools"), list) else []
    for i, name in enumerate(ignored):
        if isinstance(name, str) and name in known:
            problems.append(_Problem(("ignore_tools", i), f"{_q(name)} is a name of catalog tool {_q(known[name])}: its calls would "
                                                         "never be scored; remove it from one of the two"))

    def section(key: str, builtin: dict[str, dict[str, float]]) -> dict[str, Any]:
        own = data.get(key)
        return {**builtin, **own} if isinstance(own, dict) else dict(builtin)

    profiles = section("profiles", BUILTIN_PROFILES)
    for name, p in profiles.items():
        if ("profiles", name) not in bad and isinstance(p, dict) and _number(p.get("cost_weight")) and _number(p.get("latency_weight")):
            cost, latency = float(p["cost_weight"]), float(p["latency_weight"])
            if not math.isclose(cost + latency, 1.0, abs_tol=1e-9):
                problems.append(_Problem(("profiles", name), f"cost_weight + latency_weight must sum to 1 (got {cost} + {latency} = {cost + latency:g})"))
    thresholds = section("thresholds", BUILTIN_THRESHOLDS)
    for name, t in thresholds.items():
        if ("thresholds", name) not in bad and isinstance(t, dict) and _number(t.get("warn")) and _number(t.get("fail")):
            if float(t["warn"]) < float(t["fail"]):
                problems.append(_Problem(("thresholds", name), f"warn ({float(t['warn'])}) must be at least fail ({float(t['fail'])})"))
    readable = {key: isinstance(data.get(key, {}), dict) for key in ("profiles", "thresholds")}  # else the schema says so
    for key, names, what in (("default_profile", profiles, "profile"), ("default_environment", thresholds, "environment")):
        value = data.get(key)
        if isinstance(value, str) and value not in names and readable[what.replace("environment", "threshold") + "s"]:
            problems.append(_Problem((key,), f"unknown {what} {_q(value)}; known: {_some(names)}"))

    problems += _gate_problems(data)

    tasks = data.get("tasks")
    for name, spec in (tasks.items() if isinstance(tasks, dict) else ()):
        if not isinstance(spec, dict):
            continue
        at = ("tasks", name)
        capability = spec.get("capability")
        if tools and isinstance(capability, str) and capability and capability not in capabilities:
            problems.append(_Problem(at + ("capability",), f"no tool in the catalog has capability {_q(capability)}"))
        profile = spec.get("profile")
        if isinstance(profile, str) and profile not in profiles and readable["profiles"]:
            problems.append(_Problem(at + ("profile",), f"unknown profile {_q(profile)}; known: {_some(profiles)}"))
        references = [(at + ("optimal_tool",), spec.get("optimal_tool"))]
        for key in ("acceptable_tools", "expected_tools"):
            if isinstance(spec.get(key), list):
                references += [(at + (key, i), n) for i, n in enumerate(spec[key])]
        for path, tool in references:
            if tools and isinstance(tool, str) and tool not in known:
                problems.append(_Problem(path, f"unknown tool {_q(tool)}; known tools: {_some(tools)}"))
    return problems


def _gate_problems(data: dict[str, Any]) -> list[_Problem]:
    """`thresholds.<env>.gates`: efficiency left to the environment's warn and fail, warn on the safe side of fail."""
    own = data.get("thresholds")
    problems: list[_Problem] = []
    for environment, entry in (own.items() if isinstance(own, dict) else ()):
        levels = entry.get("gates") if isinstance(entry, dict) else None
        at = ("thresholds", environment, "gates")
        for metric, level in (levels.items() if isinstance(levels, dict) else ()):
            if metric == "efficiency":
                problems.append(_Problem(at + (metric,), f"efficiency is gated at thresholds.{environment}.warn and .fail "
                                                         "(which live scoring uses too): set them there"))
                continue
            if metric not in GATE_LEVEL_METRICS or not isinstance(level, dict):
                continue
            higher, _, _ = GATE_LEVEL_METRICS[metric]
            fail, warn = level.get("fail"), level.get("warn")
            if _number(fail) and _number(warn) and (warn < fail if higher else warn > fail):
                problems.append(_Problem(at + (metric,), f"warn ({float(warn):g}) must be {'at least' if higher else 'at most'} "
                                                         f"fail ({float(fail):g}): {'higher' if higher else 'lower'} is better "
                                                         f"for {metric}"))
    return problems


_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_TEXT_KEYS = frozenset({"description", "title", "$comment", "format"})
_COUNT_KEYS = frozenset({"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"})
_NUMBER_KEYS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_ANY_KEYS = frozenset({"default", "const"})


def _surely_valid_schema(schema: Any, depth: int = 0) -> bool:
    """True when `schema` uses only the plain keywords of tool parameters, each well-formed: then it
    is a valid JSON Schema without asking jsonschema's meta-validation (~0.7 ms a schema, seconds
    for 10,000 tools). False means "not sure": `check_schema` decides, and explains."""
    if type(schema) is bool:
        return True
    if type(schema) is not dict or depth > 32:
        return False
    for key, value in schema.items():
        if key == "type":
            ok = value in _TYPES if type(value) is str else (
                type(value) is list and value != [] and all(type(v) is str and v in _TYPES for v in value)
                and len(set(value)) == len(value))
        elif key == "properties":
            ok = type(value) is dict and all(_surely_valid_schema(v, depth + 1) for v in value.values())
        elif key in ("items", "additionalProperties"):
            ok = _surely_valid_schema(value, depth + 1)
        elif key == "required":
            ok = type(value) is list and all(type(v) is str for v in value) and len(set(value)) == len(value)
        elif key == "enum" or key == "examples":
            ok = type(value) is list
        elif key in _TEXT_KEYS:
            ok = type(value) is str
        elif key in _COUNT_KEYS:
            ok = type(value) is int and value >= 0
        elif key in _NUMBER_KEYS:
            ok = type(value) in (int, float)
        else:
            ok = key in _ANY_KEYS
        if not ok:
            return False
    return True


def _parameters_problems(path: tuple[Any, ...], schema: Mapping[str, Any]) -> list[_Problem]:
    if _surely_valid_schema(schema):
        return []
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return [_Problem(path + tuple(exc.absolute_path), f"not a valid JSON Schema: {_one_line(exc.message, 200)}")]
    return []


def _build(data: dict[str, Any], source: str) -> Catalog:
    """The `Catalog` of data that passed every check."""
    tools: dict[str, Tool] = {}
    by_alias: dict[str, Tool] = {}
    for name, spec in data["tools"].items():
        tools[name] = Tool(
            name=name,
            cost_usd=float(spec["cost_usd"]),
            latency_ms=float(spec["latency_ms"]),
            capabilities=tuple(spec["capabilities"]),
            complexity=spec["complexity"],
            aliases=tuple(spec.get("aliases", ())),
            parameters=spec.get("parameters"),
            latency_slo_ms=spec.get("latency_slo_ms"),
            description=spec.get("description", ""),
            context_usd=float(spec.get("context_usd", 0.0)),
        )
    for tool in tools.values():
        for alias in tool.aliases:
            by_alias.setdefault(alias, tool)
    profiles = {n: Profile(n, float(p["cost_weight"]), float(p["latency_weight"])) for n, p in {**BUILTIN_PROFILES, **data.get("profiles", {})}.items()}
    thresholds = {n: Thresholds(n, float(t["warn"]), float(t["fail"])) for n, t in {**BUILTIN_THRESHOLDS, **data.get("thresholds", {})}.items()}

    def tool_name(name: str) -> str:
        return (tools.get(name) or by_alias[name]).name

    tasks = []
    for name, spec in (data.get("tasks") or {}).items():
        optimal = spec.get("optimal_tool")
        tasks.append(
            TaskRoute(
                name=name,
                capability=spec["capability"],
                match={k: tuple(map(str, v)) if isinstance(v, list) else (str(v),) for k, v in (spec.get("match") or {}).items()},
                complexity=spec.get("complexity"),
                profile=spec.get("profile"),
                optimal_tool=tool_name(optimal) if optimal is not None else None,
                acceptable_tools=tuple(map(tool_name, spec.get("acceptable_tools", ()))),
                expected_tools=tuple(map(tool_name, spec.get("expected_tools", ()))),
                max_calls=spec.get("max_calls"),
            )
        )
    models = {n: ModelPrice(float(m["input_per_1k"]), float(m["output_per_1k"]),
                            float(m["cached_input_per_1k"]) if "cached_input_per_1k" in m else None)
              for n, m in (data.get("models") or {}).items()}
    mapping = AttributeMapping(**data["attribute_mapping"]) if data.get("attribute_mapping") else None
    gates = {environment: {metric: GateLevel(metric, float(level if not isinstance(level, dict) else level["fail"]),
                                             float(level["warn"]) if isinstance(level, dict) and "warn" in level else None,
                                             GATE_LEVEL_METRICS[metric][0])
                           for metric, level in levels.items()}
             for environment, levels in ((n, t.get("gates") or {}) for n, t in (data.get("thresholds") or {}).items())
             if levels}
    return Catalog(
        tools=tools,
        profiles=profiles,
        thresholds=thresholds,
        default_profile=data.get("default_profile", "balanced"),
        default_environment=data.get("default_environment", "production"),
        tasks=tuple(tasks),
        models=models,
        attribute_mapping=mapping,
        source=source,
        # By default, a tool the catalog lists is scored even if frameworks use its name internally.
        ignore_tools=frozenset(data["ignore_tools"]) if "ignore_tools" in data else DEFAULT_IGNORE_TOOLS.difference(tools, by_alias),
        gates=gates,
        _by_alias=by_alias,
    )

