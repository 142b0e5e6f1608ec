"""promtool (Debian's `prometheus` package) on every shipped file: `check config`,
`check rules` and the unit tests in collector-config/rules/tests/, plus checks that
every alert has a firing and a silent unit test and every recording rule a unit test.
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ops_helpers import (
    PROMETHEUS_CONFIG,
    RULE_FILES,
    RULE_TESTS_DIR,
    alert_names,
    binary,
    load_yaml,
    prometheus_test_config,
    recording_rule_names,
    shorten_durations,
)

RULE_TESTS = sorted(RULE_TESTS_DIR.glob("*.test.yml"))


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("promtool"), *args], check=False, capture_output=True, text=True, cwd=cwd, timeout=120)


def assert_ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"{' '.join(result.args)} failed:\n{result.stdout}\n{result.stderr}"


@pytest.mark.parametrize("config_file", sorted(PROMETHEUS_CONFIG.parent.glob("prometheus*.yml")), ids=lambda p: p.name)
def test_check_config(config_file):
    """prometheus.yml (compose), prometheus-fleet.yml (the serve fleet) and prometheus-local.yml (no Docker)."""
    result = promtool("check", "config", str(config_file))
    assert_ok(result)
    assert "2 rule files found" in result.stdout + result.stderr


def test_a_local_config_scrapes_the_demo_on_localhost():
    """The newcomer path without Docker: `otel-agent-eval demo --duration 0` and a Prometheus on the same machine."""
    config = load_yaml(PROMETHEUS_CONFIG.parent / "prometheus-local.yml")
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "agent-eval" and job["static_configs"][0]["targets"] == ["localhost:9464"]


@pytest.mark.parametrize("rule_file", RULE_FILES, ids=lambda p: p.name)
def test_check_rules(rule_file):
    assert_ok(promtool("check", "rules", str(rule_file)))


def test_check_config_and_rules_of_the_integration_test_copies(tmp_path):
    """The short-duration copies the integration test runs are valid too."""
    copies = []
    for rule_file in RULE_FILES:
        copy = tmp_path / rule_file.name
        copy.write_text(shorten_durations(rule_file.read_text()))
        assert_ok(promtool("check", "rules", str(copy)))
        copies.append(copy)
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_test_config(copies, "127.0.0.1:9464")))
    assert_ok(promtool("check", "config", str(config)))


def test_rule_unit_tests_exist():
    assert {p.name for p in RULE_TESTS} >= {"agent-eval-alerts.test.yml", "agent-eval-recording.test.yml"}


@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests(test_file):
    result = promtool("test", "rules", test_file.name, cwd=test_file.parent)
    assert_ok(result)
    assert "SUCCESS" in result.stdout


def test_promtool_reports_a_failing_unit_test(tmp_path):
    """The unit tests can fail: a wrong expectation is reported, not passed over."""
    broken = load_yaml(RULE_TESTS_DIR / "agent-eval-alerts.test.yml")
    broken["rule_files"] = [str(RULE_TESTS_DIR / f) for f in broken["rule_files"]]
    test = next(t for t in broken["tests"] if any(a["exp_alerts"] for a in t.get("alert_rule_test", [])))
    firing = next(a for a in test["alert_rule_test"] if a["exp_alerts"])
    firing["exp_alerts"] = []
    broken["tests"] = [test]
    path = tmp_path / "broken.test.yml"
    path.write_text(yaml.safe_dump(broken))
    result = promtool("test", "rules", str(path))
    assert result.returncode != 0
    assert firing["alertname"] in result.stdout + result.stderr


def _unit_tests() -> list[dict[str, Any]]:
    return [test for path in RULE_TESTS for test in load_yaml(path)["tests"]]


def test_every_alert_has_a_firing_and_a_silent_unit_test():
    firing: set[str] = set()
    silent: set[str] = set()
    for test in _unit_tests():
        for case in test.get("alert_rule_test", []):
            (firing if case["exp_alerts"] else silent).add(case["alertname"])
            for alert in case["exp_alerts"]:  # the runbook text is checked word for word
                assert alert.get("exp_annotations", {}).keys() >= {"summary", "description"}, case["alertname"]
    alerts = set(alert_names())
    assert alerts - firing == set(), "alerts never shown firing"
    assert alerts - silent == set(), "alerts never shown staying silent"
    assert (firing | silent) - alerts == set(), "unit tests for alerts that do not exist"


def test_every_recording_rule_has_a_unit_test():
    tested = {case["expr"].split("{")[0].strip() for test in _unit_tests() for case in test.get("promql_expr_test", [])}
    assert set(recording_rule_names()) - tested == set()
