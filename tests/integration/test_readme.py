"""Every example in the README runs as written, in order: a person pasting them gets no error.

The walkthrough is two scripts, each in a directory of its own, so that the suite's two workers
run them at once: the upgrade paths' section (its clusters and rolling restarts, about half of
the time) in test_readme_upgrades.py, and every other section here. No example of one uses what
the other made."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
# Examples that need what this test does not start: make targets (the suite itself runs under
# one), a Docker engine, locust and Spark; their own tests run them.
PYTHON = ("from ", "import ")  # a block of Python, not shell commands
NOT_HERE = ("make ", "docker ", "locust ", "spark-submit ")
# Minutes of load: tests/integration/test_perf_cases.py runs the command with shorter settings.
NOT_HERE += ("tidelog perf tiered-storage", "tidelog report runs/ts")
NOT_HERE += ("tidelog perf max-rate",)  # minutes of steps: test_perf_cases.py runs short ones
# Faults held past a session timeout, a minute and a half together: test_netns.py runs the
# network failures (the command itself, killed and stopped, too) and test_disk_faults.py the disk
# ones, on clusters of their own.
NOT_HERE += (
    "tidelog scenario replication --netns",
    "tidelog scenario replication --failure disk_",
)
# Scenarios whose own tests run the same failures on clusters of their own, each 15-25 s of one
# worker that the walkthrough need not spend again: power loss (test_power_loss.py), the
# compacted audit (test_compacted_audit.py), wipe_and_rebuild (test_tiered.py), the upgrade under
# load (test_upgrade_scenario.py; to 2.1, nine rolling restarts: test_upgrade_v2.py). The
# walkthrough keeps a passing scenario and a failing one.
NOT_HERE += (
    "tidelog scenario replication --failure power_loss",
    "tidelog scenario replication --compacted",
    "tidelog scenario replication --failure wipe_and_rebuild",
    "tidelog scenario upgrade --from 0.10.0",
)
# The benchmarks run from the checkout (the walkthrough runs in a directory of its own), and
# they measure rather than check: they are run by hand, or by `make bench`.
NOT_HERE += (".venv/bin/python benchmarks/",)
# The compose cluster's section, and a scenario on one elsewhere, need a Docker engine and the
# images: tests/containers runs what their examples do.
NOT_HERE += ("tidelog scenario replication --compose",)
# A Spark cluster's daemons, started in the background: test_spark_cluster.py starts the same
# ones on free ports and runs the report there.
NOT_HERE_SECTIONS = ("## Containers", "### Reports on a Spark cluster")
UPGRADE_PATHS = "## Upgrade paths: brokers of older releases"


def readme_without_sections(text: str, skipped: tuple[str, ...]) -> str:
    """The README with the sections whose heading is in ``skipped`` left out (up to the next
    heading of the same or a higher level)."""
    kept: list[str] = []
    skipping_level = 0
    for line in text.splitlines():
        level = len(line) - len(line.lstrip("#")) if line.startswith("#") else 0
        if level and skipping_level and level <= skipping_level:
            skipping_level = 0
        if level and line.strip() in skipped:
            skipping_level = level
        if not skipping_level:
            kept.append(line)
    return "\n".join(kept)


def only_section(text: str, heading: str) -> str:
    """The README's section under ``heading``, its subsections included."""
    lines = text.splitlines()
    start = lines.index(heading)
    level = len(heading) - len(heading.lstrip("#"))
    end = next(
        (
            number
            for number in range(start + 1, len(lines))
            if lines[number].startswith("#")
            and len(lines[number]) - len(lines[number].lstrip("#")) <= level
        ),
        len(lines),
    )
    return "\n".join(lines[start:end])


def code_blocks(text: str) -> list[list[str]]:
    """The README's indented code blocks, each as its commands (continuation lines joined)."""
    blocks: list[list[str]] = []
    current: list[str] = []
    previous_blank = True
    for line in text.splitlines():
        if line.startswith("    ") and (current or previous_blank):
            current.append(line[4:])
        elif current:  # a blank or unindented line ends the block
            blocks.append(current)
            current = []
        previous_blank = not line.strip()
    if current:
        blocks.append(current)
    return [re.sub(r"\\\n\s*", "", "\n".join(block)).splitlines() for block in blocks]


def examples(upgrade_paths: bool = False) -> list[str]:
    """The commands of the upgrade paths' section, or of every other section."""
    text = readme_without_sections(README.read_text(), NOT_HERE_SECTIONS)
    if upgrade_paths:
        text = only_section(text, UPGRADE_PATHS)
    else:
        text = readme_without_sections(text, (UPGRADE_PATHS,))
    return [
        command
        for block in code_blocks(text)
        if not block[0].startswith(PYTHON)
        for command in block
        if command.strip() and not command.startswith(NOT_HERE)
    ]


def test_the_readme_has_the_walkthrough_this_test_runs():
    commands = examples()
    assert commands[0].startswith("tidelog cluster up")
    assert any(command.startswith("tidelog scenario replication") for command in commands)
    assert "tidelog cluster down --dir ./my-cluster" in commands


def run_walkthrough(commands: list[str], directory: Path) -> subprocess.CompletedProcess:
    """Runs ``commands`` as one bash script in ``directory`` (stopping at the first that fails),
    with ``directory``/tmp as TMPDIR; brings down whatever cluster they left running."""
    temporary = directory / "tmp"
    temporary.mkdir()
    # each command shown with the seconds since the start (bash's SECONDS), to see where the
    # walkthrough's time goes
    shown = (
        f'echo "[$SECONDS s]" {shlex.quote("$ " + command)} >&2\n{command}' for command in commands
    )
    script = "set -e\n" + "\n".join(shown) + "\n"
    environment = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "TMPDIR": str(temporary),
    }
    try:
        result = subprocess.run(
            ["bash", "-c", script],
            cwd=directory,
            env=environment,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    finally:  # whatever the examples left running, if one of them failed
        for state in directory.glob("*/cluster.json"):
            subprocess.run(
                [sys.executable, "-m", "tidelog.cli", "cluster", "down", "--dir", state.parent],
                capture_output=True,
                check=False,
            )
    print("\n".join(line for line in result.stderr.splitlines() if line.startswith("[")))
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    return result


def test_the_walkthrough_is_every_example_once():
    walkthrough, upgrade_paths = examples(), examples(upgrade_paths=True)
    assert upgrade_paths[0].startswith("tidelog cluster up")
    assert any(command.startswith("tidelog upgrade run") for command in upgrade_paths)
    assert not any(command.startswith("tidelog upgrade") for command in walkthrough)
    readme = readme_without_sections(README.read_text(), NOT_HERE_SECTIONS)
    every = [
        command
        for block in code_blocks(readme)
        if not block[0].startswith(PYTHON)
        for command in block
        if command.strip() and not command.startswith(NOT_HERE)
    ]
    assert sorted(walkthrough + upgrade_paths) == sorted(every)


def test_every_readme_example_runs_as_written(tmp_path):
    result = run_walkthrough(examples(), tmp_path)
    assert "verdict: PASS" in result.stdout
    assert "hello, tidelog" in result.stdout
    # a passing scenario removes its cluster; the failing one (truncation by high watermark
    # loses messages) keeps it for a look, and says where
    (kept,) = (tmp_path / "tmp").iterdir()
    assert f"the cluster's logs and data are kept in {kept}" in result.stdout
