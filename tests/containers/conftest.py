"""Tests against a real Docker engine: the engine (started if it can be), tidelog's images, and
one compose cluster shared by a module.

Where no engine answers and none can be started (no docker.io to install, not root), every test
here is skipped with the one reason ``scripts/docker-engine.sh --check`` gives.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# Ryuk, testcontainers' reaper, is an image from a registry that may not be reachable; the
# fixtures here remove what they start.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

from testcontainers.compose import DockerCompose

from tidelog.cluster.compose import ComposeCluster
from tidelog.cluster.delivery import DeliveryProducer
from tidelog.cluster.scenario import SCENARIO_OVERRIDES

ROOT = Path(__file__).resolve().parents[2]
ENGINE_SCRIPT = ROOT / "scripts" / "docker-engine.sh"


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """An engine that answers and tidelog's images, built (or found in the layer cache)."""
    check = subprocess.run([str(ENGINE_SCRIPT), "--check"], capture_output=True, text=True)
    if check.returncode != 0:
        pytest.skip(f"no Docker engine: {check.stdout.strip() or check.stderr.strip()}")
    started = time.monotonic()
    done = subprocess.run(
        [str(ENGINE_SCRIPT), "--images"], capture_output=True, text=True, timeout=1500
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/docker-engine.sh --images failed:\n{done.stdout}\n{done.stderr}")
    print(
        f"\n{done.stdout.strip()}\n(engine and images ready in {time.monotonic() - started:.0f} s)"
    )


@pytest.fixture(scope="package")
def compose_cluster(
    docker_engine: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ComposeCluster]:
    """compose.yaml's cluster (ZooKeeper and three brokers) on free host ports, with the
    scenarios' quick failure detection and the remote tier (docker/remote.env; local retention
    checked every second), started through testcontainers' DockerCompose, which returns once
    every healthcheck passes. One for the container tests (starting one costs about a minute),
    removed once the last of them has run. Left idle until the session's end (the last third
    or half of the suite), it kept the machine 0.56 cores busier: its brokers' one-second
    tasks and fetches, the engine's healthchecks."""
    cluster = ComposeCluster.create(
        tmp_path_factory.mktemp("compose"),
        ROOT / "compose.yaml",
        project=f"tidelog-test-{os.getpid()}",
        settings={**SCENARIO_OVERRIDES, "log.retention.check.interval.ms": "1000"},
        remote_tier=True,
    )
    compose = DockerCompose(
        context=ROOT, compose_file_name="compose.yaml", env_file=str(cluster.env_file), wait=True
    )
    compose.start()
    try:
        cluster.link_log_dirs()
        yield cluster
    finally:
        compose.stop()  # down --volumes


async def produce_through(
    bootstrap_servers: str, topic: str, roll: list[str], produce_version: int = 2
) -> tuple[DeliveryProducer, subprocess.CompletedProcess]:
    """Produces acks=all at 50 messages/s while the command ``roll`` (an upgrade) runs; returns
    the producer and the finished command."""
    producer = DeliveryProducer(
        bootstrap_servers, topic, acks=-1, rate=50, produce_version=produce_version
    )
    stop = asyncio.Event()
    task = asyncio.create_task(producer.run(stop))
    await asyncio.sleep(2)  # acknowledgements before the first broker goes
    done = await asyncio.to_thread(
        subprocess.run, roll, capture_output=True, text=True, timeout=900
    )
    await asyncio.sleep(2)
    stop.set()
    await task
    return producer, done
