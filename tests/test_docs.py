"""The code blocks that README.md and docs/ say run, run.

A block claims to run when the line before its fence (blank lines between allowed) is a marker:

    <!-- docs-test: python -->    a Python script, run with this interpreter
    <!-- docs-test: pytest -->    a pytest module, run with `python -m pytest`: every test passes
    <!-- docs-test: catalog -->   a catalog YAML, accepted by `otel-agent-eval catalog check`
    <!-- docs-test: console -->   each `$ ` command (`\\` continues a line) exits 0, run by bash

Each block runs in a fresh temporary directory holding `catalog.yaml` (a copy of
examples/catalog.yaml, for the blocks that name one), with this interpreter's bin directory
first on PATH (`otel-agent-eval` is the project's) and OTEL_AGENT_EVAL_METRICS_ENABLED=false,
so that an `install()` binds no port beside the other tests. Blocks that need services (a
Collector, an app, recorded traces) carry no marker.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import real_traces

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKER = re.compile(r"^<!-- docs-test: (?P<kind>\S+) -->$")
FENCE = re.compile(r"^(?P<fence>```+)(?P<lang>\S*)")
LANGUAGES = {"python": {"python"}, "pytest": {"python"}, "catalog": {"yaml"}, "console": {"console", "bash"}}
TIMEOUT_S = 300
# Real traces others recorded (../shared/real-traces/SOURCES.md): docs/first-catalog.md's walkthrough of measured costs
# scores the Vercel AI SDK set, linked (never copied) into the block's directory as `vercel-traces/`


@dataclass(frozen=True)
class Block:
    where: str  # page:line of the marker
    kind: str
    lang: str
    code: str


def marked_blocks() -> list[Block]:
    blocks = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines):
            marker = MARKER.match(line)
            if not marker:
                continue
            where = f"{page.relative_to(ROOT)}:{number + 1}"
            start = number + 1
            while start < len(lines) and not lines[start].strip():
                start += 1
            fence = FENCE.match(lines[start]) if start < len(lines) else None
            assert fence, f"{where}: a docs-test marker must come right before a fenced code block"
            end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() == fence["fence"]), None)
            assert end is not None, f"{where}: the fenced block never closes"
            blocks.append(Block(where, marker["kind"], fence["lang"], "\n".join(lines[start + 1:end]) + "\n"))
    return blocks


BLOCKS = marked_blocks()


def test_markers_name_a_known_kind_on_a_block_of_its_language():
    assert len(BLOCKS) >= 6, f"only {len(BLOCKS)} marked blocks: did the marker or the pages move?"
    for block in BLOCKS:
        assert block.kind in LANGUAGES, f"{block.where}: unknown docs-test kind {block.kind!r}"
        assert block.lang in LANGUAGES[block.kind], f"{block.where}: a {block.kind} block must be {LANGUAGES[block.kind]}"
    assert {block.kind for block in BLOCKS} == set(LANGUAGES), "every kind of marker is used at least once"


def console_commands(code: str) -> list[str]:
    """The `$ ` commands of a console block, continuation lines joined; the output lines left out."""
    commands: list[str] = []
    continued = False
    for line in code.splitlines():
        if continued:
            commands[-1] += "\n" + line
        elif line.startswith("$ "):
            commands.append(line[2:])
        else:
            continue
        continued = line.endswith("\\")
    return commands


def test_console_commands_are_read_with_their_continuations():
    code = "$ one --a \\\n  --b\noutput line\n$ two\n"
    assert console_commands(code) == ["one --a \\\n  --b", "two"]


def run_in(cwd: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OTEL_AGENT_EVAL_METRICS_ENABLED": "false",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_marked_block_runs(block: Block, tmp_path: Path):
    shutil.copy(ROOT / "examples" / "catalog.yaml", tmp_path / "catalog.yaml")
    if "vercel-traces" in block.code:
        (tmp_path / "vercel-traces").symlink_to(real_traces() / "sideseat-vercel-ai")
    if block.kind == "python":
        (tmp_path / "block.py").write_text(block.code)
        results = [run_in(tmp_path, [sys.executable, "block.py"])]
    elif block.kind == "pytest":
        (tmp_path / "test_block.py").write_text(block.code)
        results = [run_in(tmp_path, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:deepeval",
                                     "test_block.py"])]
        assert re.search(r"\b\d+ passed\b", results[0].stdout) and " failed" not in results[0].stdout, results[0].stdout
    elif block.kind == "catalog":
        (tmp_path / "block-catalog.yaml").write_text(block.code)
        results = [run_in(tmp_path, [sys.executable, "-m", "otel_agent_eval.tools.cli", "catalog", "check",
                                     "block-catalog.yaml"])]
    else:
        commands = console_commands(block.code)
        assert commands, f"{block.where}: a console block without a `$ ` command"
        results = [run_in(tmp_path, ["bash", "-o", "pipefail", "-c", command]) for command in commands]
    for result in results:
        assert result.returncode == 0, f"{block.where}: {result.args}\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stderr, f"{block.where}: {result.stderr}"


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return {github_anchor(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_the_readme_links_only_to_files_and_headings_that_exist():
    """mkdocs --strict checks the links inside docs/; README.md is outside the site, so here."""
    readme = ROOT / "README.md"
    links = re.findall(r"\]\(([^)\s]+)\)", readme.read_text())
    assert len(links) >= 20, links
    broken = []
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = (ROOT / path) if path else readme
        if not target.exists() or (anchor and anchor not in headings(target)):
            broken.append(link)
    assert not broken, f"README.md links to what does not exist: {broken}"


def test_the_site_builds_with_strict_link_and_anchor_checks(tmp_path: Path):
    """`make docs` and CI: `mkdocs build --strict` fails on a broken link or anchor, including
    in collector-config/README.md, which docs/operations-kit.md includes as a snippet."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    page = (tmp_path / "site" / "operations-kit" / "index.html").read_text()
    assert 'href="../collector/"' in page and "../docs/collector.md" not in page


def test_the_kit_readme_links_resolve_on_github():
    """collector-config/README.md read on GitHub: its relative links (inline and reference
    definitions) name files that exist next to it."""
    readme = ROOT / "collector-config" / "README.md"
    text = readme.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"^\[[^\]]+\]:\s*(\S+)", text, re.M)
    assert links
    broken = [
        link for link in links
        if not re.match(r"[a-z]+:", link) and not (readme.parent / link.partition("#")[0]).exists()
    ]
    assert not broken, f"collector-config/README.md links to what does not exist: {broken}"
