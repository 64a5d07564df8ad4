"""``tidelog scenario replication --compose``: a compose cluster of its own, a fault through the
engine, the delivery oracle's verdict."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.containers

ROOT = Path(__file__).resolve().parents[2]


def test_scenario_pauses_a_follower_container_and_loses_nothing(
    docker_engine: None, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "tidelog.cli", "scenario", "replication", "--compose"),
            *("--compose-file", str(ROOT / "compose.yaml"), "--dir", str(tmp_path)),
            *("--failure", "pause", "--target", "follower", "--rate", "100"),
            *("--report", str(tmp_path / "report.json")),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "paused broker" in done.stdout and "verdict: PASS" in done.stdout
    # the project is gone: no container or volume of it is left
    (project,) = [
        line.partition("=")[2]
        for line in (tmp_path / "compose.env").read_text().splitlines()
        if line.startswith("COMPOSE_PROJECT_NAME=")
    ]
    left = subprocess.run(
        [
            "docker",
            "ps",
            "--all",
            "--quiet",
            "--filter",
            f"label=com.docker.compose.project={project}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert left.stdout.strip() == ""
    volumes = subprocess.run(
        [
            "docker",
            "volume",
            "ls",
            "--quiet",
            "--filter",
            f"label=com.docker.compose.project={project}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert volumes.stdout.strip() == ""  # down -v took the log dirs too
