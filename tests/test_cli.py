"""The command line: catalog show/check/schema, one-line errors with exit code 2."""
from __future__ import annotations

import json
import subprocess
import sys

from otel_agent_eval.tools.cli import main


def test_catalog_show_lists_tools_and_tasks(capsys):
    assert main(["catalog", "show"]) == 0
    out = capsys.readouterr().out
    assert "basic_calculator" in out and "ml_pipeline" in out and "forecasting" in out


def test_catalog_check_ok_and_broken(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text("tools:\n  search: {cost_usd: 0, latency_ms: 5, capabilities: [s], complexity: simple}\n")
    assert main(["catalog", "check", str(good)]) == 0
    assert "ok (1 tools, 0 tasks)" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools:\n  web_search:\n    cost_usd: -0.003\n    latency_ms: 400\n    capabilities: [search]\n    complexity: moderate\n")
    assert main(["catalog", "check", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"otel-agent-eval: {bad}:3: tools.web_search.cost_usd: must be >= 0 (got -0.003)\n"


def test_catalog_schema_is_json(capsys):
    assert main(["catalog", "schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "otel-agent-eval tool catalog"


def test_console_script_gives_no_traceback_and_leaves_no_deepeval_folder(tmp_path):
    run = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "catalog", "check", "missing.yaml"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr == "otel-agent-eval: missing.yaml: cannot read the file: No such file or directory\n"
    usage = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "catalog", "frobnicate"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_console_script_entry_point_loads():
    from importlib.metadata import entry_points

    from otel_agent_eval.tools.cli import main as cli_main

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "otel-agent-eval"]
    assert script.load() is cli_main
