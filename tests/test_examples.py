"""Every example runs as a user would run it, offline, and shows the scores it promises."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from otel_agent_eval import load_catalog
from otel_agent_eval.config.catalog import parse_catalog
from otel_agent_eval.tools.cli import main as cli_main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TIMEOUT_S = 120  # a hang fails the test instead of the whole run; not a speed assertion

# What each script must print: the optimal call, the suboptimal one with its optimal tool, the run.
EXPECTED = {
    "quickstart.py": [
        re.compile(r"^metrics on http://127\.0\.0\.1:\d+/metrics$", re.M),
        re.compile(r'^agent_eval_tool_calls_total\{(?=[^}]*gen_ai_tool_name="local_index")(?=[^}]*outcome="optimal")'
                   r'(?=[^}]*task="faq")[^}]*\} 1\.0$', re.M),
        re.compile(r'^agent_eval_tool_calls_total\{(?=[^}]*gen_ai_tool_name="web_search")(?=[^}]*outcome="suboptimal")'
                   r'(?=[^}]*optimal_tool="local_index")(?=[^}]*verdict="fail")[^}]*\} 1\.0$', re.M),
    ],
    "pydantic_ai_agent.py": [
        "call basic_calculator: optimal, efficiency 1.00 (pass), optimal tool basic_calculator",
        "call wolfram_alpha: suboptimal, efficiency 0.00 (fail), optimal tool basic_calculator, cost $0.010 (wasted $0.010)",
        "run math_agent (task arithmetic): completed",
        "spurious ['wolfram_alpha'], over budget True",
    ],
    "openai_agents_agent.py": [
        "call local_index: optimal, efficiency 1.00 (pass), optimal tool local_index",
        "call web_search: suboptimal",
        "optimal tool local_index, cost $0.003 (wasted $0.003)",
        "run support_agent (task faq): completed",
        "spurious ['web_search']",
        "answer: Returns are accepted within 30 days.",
    ],
    "langchain_tools.py": [
        "call simple_filter: optimal, efficiency 1.00 (pass), optimal tool simple_filter",
        "call ml_pipeline: suboptimal, efficiency 0.00 (fail), optimal tool simple_filter, cost $0.100 (wasted $0.100)",
        "Complexity mismatch: simple task using advanced tool",
        "run analytics_agent (task analytics): completed",
        "spurious ['ml_pipeline']",
    ],
}


def example_env(tmp_path: Path) -> dict[str, str]:
    # No stray OTEL_* settings or exporters, and no proxy between the quickstart and its own /metrics.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and not k.lower().endswith("_proxy")}
    env.update(
        DEEPEVAL_TELEMETRY_OPT_OUT="YES",
        DEEPEVAL_CACHE_FOLDER=str(tmp_path / ".deepeval"),
        OPENAI_API_KEY="sk-placeholder-never-used",
        OTEL_AGENT_EVAL_METRICS_PORT="0",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=tmp_path, env=example_env(tmp_path),
                          capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_example_runs_offline_and_prints_the_scores(script, tmp_path):
    result = run([str(EXAMPLES / script)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    for expected in EXPECTED[script]:
        if isinstance(expected, str):
            assert expected in result.stdout, f"{expected!r} not in:\n{result.stdout}\n{result.stderr}"
        else:
            assert expected.search(result.stdout), f"{expected.pattern!r} not in:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    assert "otel-agent-eval:" not in result.stderr, result.stderr  # the processor logged no failure


def test_every_example_is_run_here_and_listed_in_the_readme():
    scripts = {p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("test_")}
    assert scripts == set(EXPECTED)
    readme = (EXAMPLES / "README.md").read_text()
    for name in [*scripts, "catalog.yaml", "test_agent_efficiency.py"]:
        assert f"`{name}`" in readme, name


def test_the_ci_example_passes_under_pytest(tmp_path):
    result = run(["-m", "pytest", str(EXAMPLES / "test_agent_efficiency.py"), "-p", "no:deepeval",
                  "-p", "no:cacheprovider", "-q"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b3 passed\b", result.stdout), result.stdout


def test_example_catalog_loads_and_checks(capsys):
    catalog = load_catalog(EXAMPLES / "catalog.yaml")
    assert {"kb_search", "web_search", "crm_lookup", "sql_query", "forecast_model"} <= set(catalog.tools)
    assert [t.name for t in catalog.tasks] == ["account_questions", "support_faq", "reporting", "forecasting"]
    assert {"chat", "batch"} <= set(catalog.profiles) and set(catalog.thresholds) >= {"development", "staging", "production"}
    assert catalog.models and catalog.attribute_mapping is None  # the mapping is only an example, commented out
    assert cli_main(["catalog", "check", str(EXAMPLES / "catalog.yaml")]) == 0
    assert "ok (5 tools, 4 tasks)" in capsys.readouterr().out


def test_the_commented_attribute_mapping_is_valid_once_uncommented():
    text = (EXAMPLES / "catalog.yaml").read_text()
    head, marker, tail = text.partition("# attribute_mapping:")
    assert marker, "the commented attribute_mapping example is missing"
    uncommented = head + "attribute_mapping:" + re.sub(r"^#   ", "  ", tail, flags=re.M)
    mapping = parse_catalog(uncommented, source="uncommented").attribute_mapping
    assert mapping is not None and mapping.tool_name == "acme.tool.name" and mapping.agent_name == "acme.agent"
