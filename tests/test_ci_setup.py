"""`.ci/setup`, which `make test` runs first: it installs what the suite needs where it is missing, and nothing (no
`apt-get update`, no network) where all is there. It runs here in a copy of the repository's pieces it reads, with a
PATH of its own: the machine's real tools for the "everything present" path, and for the "missing" paths a PATH that
hides some, with stand-ins for `apt-get`, `sudo` and `npm` that record what they were asked (nothing is installed).
A real fresh machine is tried by hand (docs/development.md)."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BASICS = ("bash", "env", "id", "cat", "cut", "sha256sum", "sed", "dirname", "mkdir", "mktemp", "rm", "mv", "cp")
TOOLS = ("promtool", "prometheus", "chromium", "node", "npm", "valgrind", "cargo")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The pieces of the repository `.ci/setup` reads, with tests/node's packages installed from the current lock."""
    repo = tmp_path / "repo"
    for piece in (".ci/setup", ".ci/collector", "collector-config/builder-config.yaml", "tests/node/package-lock.json"):
        (repo / piece).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / piece, repo / piece)
    stamp(repo, (repo / "tests/node/package-lock.json").read_bytes())
    return repo


def stamp(repo: Path, lock: bytes) -> Path:
    path = repo / "tests/node/node_modules/.installed-lock.sha256"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(hashlib.sha256(lock).hexdigest() + "\n")
    return path


def recorder(bin_dir: Path, name: str, log: Path, *, run_rest: bool = False, output: str = "") -> None:
    """A stand-in command that appends its name and arguments to `log` (and, for sudo, runs them)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    body = f'echo "{name} $*" >> "{log}"\n'
    body += 'exec "$@"\n' if run_rest else (f"echo {output}\n" if output else "")
    (bin_dir / name).write_text("#!/bin/bash\n" + body)
    (bin_dir / name).chmod(0o755)


def isolated_path(tmp_path: Path, present: tuple[str, ...], log: Path) -> str:
    """A PATH holding the basic commands and, of the suite's tools, only `present` (stand-ins that do nothing)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in BASICS:
        found = shutil.which(name)
        assert found, name
        (bin_dir / name).symlink_to(found)
    for name in present:
        recorder(bin_dir, name, log)
    return str(bin_dir)


def run_setup(repo: Path, path: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {"PATH": path, "HOME": os.environ["HOME"], **env}
    if "XDG_CACHE_HOME" in os.environ and "XDG_CACHE_HOME" not in env:  # where .ci/collector keeps the built Collector
        environment["XDG_CACHE_HOME"] = os.environ["XDG_CACHE_HOME"]
    return subprocess.run(["bash", str(repo / ".ci/setup")], env=environment, capture_output=True, text=True, timeout=120)


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_with_everything_present_it_installs_nothing_and_runs_no_apt_get_update(repo, tmp_path):
    """The machine's own tools (the suite's `make test` ran this script before pytest), with recorders for apt-get,
    sudo and npm ahead of them on PATH: none is called."""
    log, shims = tmp_path / "calls.log", tmp_path / "shims"
    for name in ("apt-get", "sudo", "npm"):
        recorder(shims, name, log)
    result = run_setup(repo, f"{shims}:{os.environ['PATH']}")
    assert result.returncode == 0, result.stderr
    assert calls(log) == []
    assert "installing" not in result.stdout + result.stderr
    assert "collector:" in result.stdout and "is built" in result.stdout


def test_missing_tools_are_installed_in_one_apt_get_after_one_update(repo, tmp_path):
    log = tmp_path / "calls.log"
    path = isolated_path(tmp_path, ("chromium", "node", "npm", "cargo"), log)  # no promtool, prometheus, valgrind
    recorder(Path(path), "apt-get", log)
    result = run_setup(repo, path)
    assert result.returncode == 0, result.stderr
    assert calls(log) == ["apt-get update", "apt-get install -y --no-install-recommends prometheus valgrind"]
    assert "setup: installing Debian's prometheus valgrind" in result.stdout


def test_node_without_npm_and_chromium_browser_as_chromium(repo, tmp_path):
    log = tmp_path / "calls.log"
    path = isolated_path(tmp_path, ("promtool", "prometheus", "chromium-browser", "node", "valgrind", "cargo"), log)
    recorder(Path(path), "apt-get", log)
    result = run_setup(repo, path)
    assert result.returncode == 0, result.stderr
    assert calls(log) == ["apt-get update", "apt-get install -y --no-install-recommends npm"]


def test_not_root_it_installs_through_sudo(repo, tmp_path):
    log = tmp_path / "calls.log"
    path = isolated_path(tmp_path, ("promtool", "prometheus", "node", "npm", "cargo"), log)  # no chromium, valgrind
    bin_dir = Path(path)
    (bin_dir / "id").unlink()
    recorder(bin_dir, "id", tmp_path / "id.log", output="1000")  # `id -u` says: not root
    recorder(bin_dir, "sudo", log, run_rest=True)
    recorder(bin_dir, "apt-get", log)
    result = run_setup(repo, path)
    assert result.returncode == 0, result.stderr
    assert calls(log) == [
        "sudo apt-get update", "apt-get update",
        "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium valgrind",
        "apt-get install -y --no-install-recommends chromium valgrind"]


@pytest.mark.parametrize(("hidden", "words"), [
    ("apt-get", ["missing prometheus", "no apt-get here", "install them"]),
    ("sudo", ["missing prometheus", "not root and no sudo", "apt-get install --no-install-recommends prometheus"]),
])
def test_it_says_in_one_line_what_to_install_when_it_cannot(repo, tmp_path, hidden, words):
    log = tmp_path / "calls.log"
    path = isolated_path(tmp_path, ("chromium", "node", "npm", "valgrind", "cargo"), log)
    bin_dir = Path(path)
    if hidden == "sudo":  # not root, no sudo; apt-get is there
        (bin_dir / "id").unlink()
        recorder(bin_dir, "id", tmp_path / "id.log", output="1000")
        recorder(bin_dir, "apt-get", log)
    result = run_setup(repo, path)
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("setup: ") and all(word in line for word in words), line
    assert calls(log) == []  # nothing attempted


def test_without_cargo_it_names_rustup(repo, tmp_path):
    log = tmp_path / "calls.log"
    path = isolated_path(tmp_path, ("promtool", "prometheus", "chromium", "node", "npm", "valgrind"), log)
    result = run_setup(repo, path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "setup: cargo not found: install Rust (https://rustup.rs), then run make test again "
        "(the tests need the native reader it builds)"]


def test_tests_node_packages_are_installed_again_only_when_the_lock_changes(repo, tmp_path):
    log = tmp_path / "calls.log"
    path = isolated_path(tmp_path, TOOLS, log)
    stamp(repo, b"the lock of another day")
    for _ in range(2):
        result = run_setup(repo, path)
        assert result.returncode == 0, result.stderr
    assert calls(log) == ["npm ci --prefix tests/node --no-audit --no-fund"]  # the second run found the stamp current


def test_an_unbuilt_collector_without_go_says_so(repo, tmp_path):
    log = tmp_path / "calls.log"
    result = run_setup(repo, isolated_path(tmp_path, TOOLS, log), XDG_CACHE_HOME=str(tmp_path / "empty-cache"))
    assert result.returncode == 1
    assert result.stderr.splitlines() == ["collector: needs Go >= 1.25 on PATH"]


def test_make_test_runs_setup_before_the_suite_and_ci_adds_only_docs_and_pythons():
    # run by `make test` itself, make's MAKEFLAGS and MAKELEVEL would make this one a sub-make that names its directory
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    dry = subprocess.run(["make", "-n", "--no-print-directory", "test"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=env).stdout.splitlines()
    assert dry[0] == "bash .ci/setup" and dry[-1].endswith("-m pytest"), dry
    ci = [line for line in (ROOT / ".ci/run").read_text().splitlines() if line and not line.startswith("#")]
    assert [line.split("#")[0].strip() for line in ci[2:]] == ["make setup", "make docs", "make test", "make test-pythons"]
