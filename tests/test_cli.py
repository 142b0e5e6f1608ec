"""The command line: catalog show/check/schema, one-line errors with exit code 2, --version; the packaging
that puts commands on PATH (the console script, the `instrument` extra for `opentelemetry-instrument`)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import entry_points, version
from pathlib import Path

import pytest

from otel_agent_eval.tools.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_catalog_show_lists_tools_and_tasks(capsys):
    assert main(["catalog", "show"]) == 0
    out = capsys.readouterr().out
    assert "basic_calculator" in out and "ml_pipeline" in out and "forecasting" in out


def test_catalog_check_ok_and_broken(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text("tools:\n  search: {cost_usd: 0, latency_ms: 5, capabilities: [s], complexity: simple}\n")
    assert main(["catalog", "check", str(good)]) == 0
    assert "ok (1 tool, 0 tasks)" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools:\n  web_search:\n    cost_usd: -0.003\n    latency_ms: 400\n    capabilities: [search]\n    complexity: moderate\n")
    assert main(["catalog", "check", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"otel-agent-eval: {bad}:3: tools.web_search.cost_usd: must be >= 0 (got -0.003)\n"


def test_catalog_check_warns_of_a_task_no_tool_fits_and_still_passes(tmp_path, capsys):
    catalog = tmp_path / "tiers.yaml"
    catalog.write_text("tools:\n  quick: {cost_usd: 0, latency_ms: 5, capabilities: [s], complexity: simple}\n"
                       "tasks:\n  research: {match: {gen_ai.agent.name: r}, capability: s, complexity: advanced}\n")
    assert main(["catalog", "check", str(catalog)]) == 0
    out, err = capsys.readouterr()
    assert "ok (1 tool, 1 task)" in out
    assert err == (f"otel-agent-eval: warning: {catalog}: tasks.research: no tool with capability 's' is advanced "
                   "(they are simple): the closest tier is picked as optimal; add a tool or set optimal_tool\n")


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


@pytest.mark.parametrize("command", [["catalog", "schema"], ["catalog", "show"]])
def test_a_reader_that_went_away_ends_the_command_quietly(command):
    """`otel-agent-eval catalog schema | head -1`: the pipe closes under the writer; exit as a shell tool
    killed by SIGPIPE does (141), no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", *command], stdout=write_end,
                             stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    assert (run.returncode, run.stderr) == (141, "")


def test_python_dash_m_runs_the_command(tmp_path):
    run = subprocess.run([sys.executable, "-m", "otel_agent_eval", "catalog", "check", "missing.yaml"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert (run.returncode, run.stderr) == (2, "otel-agent-eval: missing.yaml: cannot read the file: No such file or directory\n")


def test_the_console_script_entry_point_loads():
    from otel_agent_eval.tools.cli import main as cli_main

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "otel-agent-eval"]
    assert script.load() is cli_main


def test_version_prints_the_installed_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"otel-agent-eval {version('otel-agent-eval')}\n"
    run = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "--version"], capture_output=True, text=True)
    assert (run.returncode, run.stdout, run.stderr) == (0, f"otel-agent-eval {version('otel-agent-eval')}\n", "")


def test_the_instrument_extra_brings_opentelemetry_instrument_and_the_docs_name_it():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from packaging.requirements import Requirement

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (distro,) = [Requirement(r) for r in extras["instrument"] if Requirement(r).name == "opentelemetry-distro"]
    assert distro.specifier.contains(version("opentelemetry-distro"), prereleases=True), \
        f"the installed opentelemetry-distro {version('opentelemetry-distro')} does not satisfy {distro}"
    assert "opentelemetry-distro" in {Requirement(r).name for r in extras["test"]}, "the zero-code test needs it too"
    assert [e for e in entry_points(group="console_scripts") if e.name == "opentelemetry-instrument"]
    for page, heading in (("README.md", "###"), ("docs/getting-started.md", "##")):
        text = (ROOT / page).read_text()
        zero_code = re.search(rf"^{heading} (?:\d\. )?Zero code, under `opentelemetry-instrument`\n(.*?)(?=^#|\Z)", text, re.S | re.M)
        assert zero_code, f"{page} has no zero-code section"
        assert "pip install 'otel-agent-eval[instrument]'" in zero_code.group(1), page
