"""The cluster deployed as a Docker Swarm stack, from the file the README's `tidelog cluster stack`
writes, on a one-node swarm this module makes (and leaves again, also when a test fails): clients
through the published ports, a chaos scenario and an image roll driven with --swarm, and nothing
left once `docker stack rm` is done.

The tests share one stack and run in order: the last one removes it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer

from tests.containers.conftest import produce_through
from tidelog.cluster import faults
from tidelog.cluster.delivery import verify
from tidelog.cluster.scenario import SCENARIO_OVERRIDES
from tidelog.cluster.swarm import GATEWAY_LABEL, STACK_LABEL, SwarmCluster, close_gateways
from tidelog.controller import topics, zookeeper
from tidelog.upgrade import checks

pytestmark = pytest.mark.containers

ROOT = Path(__file__).resolve().parents[2]
TAG = os.environ.get("TIDELOG_TAG", "dev")
NEXT_TAG = f"{TAG}-next"
STACK = f"tidelog-swarm-{os.getpid()}"


def docker(*arguments: str, timeout: float = 120, check: bool = True) -> str:
    done = subprocess.run(["docker", *arguments], capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"docker {' '.join(arguments)}: {done.stderr}"
    return done.stdout


def tidelog(*arguments: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tidelog.cli", *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def swarm(docker_engine: None) -> Iterator[str]:
    """A one-node swarm on 127.0.0.1, its node labelled for ZooKeeper and every broker; left
    afterwards if this module made it."""
    state = docker("info", "--format", "{{.Swarm.LocalNodeState}}").strip()
    made = state != "active"
    # the bridge a swarm gives its nodes' published ports, left behind by `swarm leave`
    bridge_before = "docker_gwbridge" in docker("network", "ls", "--format", "{{.Name}}").split()
    if made:
        docker("swarm", "init", "--advertise-addr", "127.0.0.1", "--listen-addr", "127.0.0.1:2377")
    try:
        node = docker("info", "--format", "{{.Swarm.NodeID}}").strip()
        labels = ["tidelog.zookeeper-1", *(f"tidelog.broker-{n}" for n in (1, 2, 3))]
        docker("node", "update", *(f"--label-add={label}=true" for label in labels), node)
        yield node
    finally:
        if made:
            docker("swarm", "leave", "--force", check=False)
            if not bridge_before:
                docker("network", "rm", "docker_gwbridge", check=False)


@pytest.fixture(scope="module")
def stack_file(swarm: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's command, on free ports, with the scenarios' quick failure detection as a
    server.properties config, the listeners advertised on 127.0.0.1 (the node's address)."""
    directory = tmp_path_factory.mktemp("swarm")
    properties = directory / "server.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in SCENARIO_OVERRIDES.items()))
    first = _consecutive(4)  # three listeners, ZooKeeper
    path = directory / "stack.yaml"
    done = tidelog(
        *("cluster", "stack", "--brokers", "3", "--compose-file", str(ROOT / "compose.yaml")),
        *("--properties", str(properties), "--external-host", "127.0.0.1"),
        *("--base-port", str(first), "--zookeeper-port", str(first + 3), "-o", str(path)),
    )
    assert done.returncode == 0, done.stderr
    return path


def _consecutive(count: int) -> int:
    """The first of ``count`` consecutive ports free now."""
    import socket

    for first in range(29100, 40000, count):
        sockets = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise AssertionError(f"no {count} consecutive free ports")


@pytest.fixture(scope="module")
def stack(stack_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SwarmCluster]:
    """The stack deployed as the README says (docker stack deploy), once for the module."""
    started = time.monotonic()
    cluster = SwarmCluster.deploy(
        stack_file, STACK, tmp_path_factory.mktemp("stack"), progress=lambda _: None
    )
    print(f"\nstack {STACK} serving in {time.monotonic() - started:.0f} s")
    try:
        yield cluster
    finally:
        close_gateways()  # this process's way to the admin APIs holds the stack's network
        if docker("service", "ls", "--quiet", "--filter", f"label={STACK_LABEL}={STACK}"):
            docker("stack", "rm", STACK, check=False)
        _remove_volumes_when_free()


def _remove_volumes_when_free(timeout: float = 60) -> None:
    """The stack's volumes (Swarm leaves them), once its containers are gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        volumes = docker("volume", "ls", "--quiet", "--filter", f"label={STACK_LABEL}={STACK}")
        if not volumes.split():
            return
        docker("volume", "rm", *volumes.split(), check=False)
        time.sleep(1)


def create_topic(cluster: SwarmCluster, name: str) -> None:
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, name, 3, 3, {"min.insync.replicas": "2"})
    faults.wait_for_full_isr(cluster, name)


def test_kcat_and_kafka_python_produce_and_consume_through_the_published_ports(
    stack: SwarmCluster,
) -> None:
    status = tidelog("cluster", "status", "--swarm", STACK)
    assert status.returncode == 0, status.stderr
    assert status.stdout.count("running    True") == 3, status.stdout
    assert all(
        f"127.0.0.1:{b.port}" in stack.bootstrap_servers for b in stack.state.brokers.values()
    )
    create_topic(stack, "clients")
    lines = "".join(f"kcat-{n}\n" for n in range(20))
    subprocess.run(
        ["kcat", "-P", "-b", stack.bootstrap_servers, "-t", "clients", "-X", "acks=all"],
        input=lines,
        text=True,
        check=True,
        timeout=60,
    )
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all")
    for n in range(20):
        producer.send("clients", f"python-{n}".encode())
    producer.flush(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        "clients",
        bootstrap_servers=stack.bootstrap_servers,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )
    read_by_python = {message.value.decode() for message in consumer}
    consumer.close()
    read_by_kcat = subprocess.run(
        ["kcat", "-C", "-b", stack.bootstrap_servers, "-t", "clients", "-e", "-q"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    wanted = {f"kcat-{n}" for n in range(20)} | {f"python-{n}" for n in range(20)}
    assert read_by_python == wanted
    assert sorted(read_by_kcat) == sorted(wanted)
    # and the perf commands, with the published addresses
    perf = tidelog(
        *("perf", "produce", "--bootstrap-server", stack.bootstrap_servers, "--topic", "clients"),
        *("--num-records", "200", "--record-size", "100", "--throughput", "-1"),
    )
    assert perf.returncode == 0, perf.stderr
    assert perf.stdout.startswith("200 records sent"), perf.stdout


def test_the_admin_apis_are_reached_through_loopback_only(stack: SwarmCluster) -> None:
    """The admin API changes brokers: the stack publishes none, and this host reaches them
    through its gateway on the stack's network, published on 127.0.0.1 alone."""
    services = json.loads(
        docker("service", "inspect", *(stack.broker(b).service for b in stack.broker_ids))
    )
    published = [p["TargetPort"] for s in services for p in s["Endpoint"].get("Ports", [])]
    assert published == [b.port for b in stack.state.brokers.values()]

    view = faults.topic_view(stack.broker(1).admin_port, "__absent__")
    health = json.loads(
        urllib.request.urlopen(f"http://127.0.0.1:{stack.broker(2).admin_port}/health").read()
    )

    assert view is None and health["broker_id"] == 2
    gateways = docker("ps", "--quiet", "--filter", f"label={GATEWAY_LABEL}={STACK}").split()
    assert len(gateways) == 1
    bindings = json.loads(docker("inspect", gateways[0]))[0]["HostConfig"]["PortBindings"]
    assert {binding["HostIp"] for found in bindings.values() for binding in found} == {"127.0.0.1"}


def test_a_hard_bounce_scenario_on_the_stack_loses_nothing(
    stack: SwarmCluster, tmp_path: Path
) -> None:
    done = tidelog(
        *("scenario", "replication", "--swarm", STACK, "--dir", str(tmp_path)),
        *("--failure", "hard_bounce", "--target", "leader", "--rate", "100"),
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "killed and restarted broker" in done.stdout and "verdict: PASS" in done.stdout
    stack.wait_healthy(timeout=60)


def test_a_follower_cut_off_the_overlay_past_its_session_comes_back_and_loses_nothing(
    stack: SwarmCluster, tmp_path: Path
) -> None:
    """network_partition on a stack: the packets on the task's overlay interface dropped, then
    let through again; the broker's names still resolve afterwards, so it rejoins every ISR."""
    done = tidelog(
        *("scenario", "replication", "--swarm", STACK, "--dir", str(tmp_path)),
        *("--failure", "network_partition", "--target", "follower", "--rate", "100"),
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cut broker" in done.stdout and "verdict: PASS" in done.stdout
    assert json.loads((tmp_path / "network-faults.json").read_text()) == {"faults": []}


def test_an_upgrade_roll_to_another_tag_under_an_acks_all_producer_loses_nothing(
    stack: SwarmCluster,
) -> None:
    docker("tag", f"tidelog:{TAG}", f"tidelog:{NEXT_TAG}")
    create_topic(stack, "rolled")
    roll = [
        *(sys.executable, "-m", "tidelog.cli", "upgrade", "roll"),
        *("--swarm", STACK, "--dir", str(stack.directory), "--image-tag", NEXT_TAG),
    ]

    started = time.time()
    producer, done = asyncio.run(produce_through(stack.bootstrap_servers, "rolled", roll))
    assert done.returncode == 0, done.stdout + done.stderr
    for broker_id in stack.broker_ids:
        assert f"broker {broker_id} runs tidelog:{NEXT_TAG}; back in every ISR" in done.stdout
    assert {stack.running_image(b) for b in stack.broker_ids} == {f"tidelog:{NEXT_TAG}"}
    checks.wait_in_sync(stack, 60)
    during = [a for a in producer.acked if started < a.acked_at < time.time() - 2]
    assert len(during) > 50, f"{len(during)} acknowledged during the roll"
    report = asyncio.run(verify(stack, "rolled", producer.acked))
    assert report.ok, report.table()


def test_docker_stack_rm_leaves_no_service_container_or_network(stack: SwarmCluster) -> None:
    # what Swarm did with the brokers' tasks over the module (a replaced task shows its error)
    for broker_id in stack.broker_ids:
        print(docker("service", "ps", "--no-trunc", stack.broker(broker_id).service))
    stack.remove(progress=lambda _: None)
    assert (
        docker("ps", "--all", "--quiet", "--filter", f"label={GATEWAY_LABEL}={STACK}").split() == []
    )
    label = f"label={STACK_LABEL}={STACK}"
    assert docker("service", "ls", "--quiet", "--filter", label).split() == []
    assert docker("ps", "--all", "--quiet", "--filter", label).split() == []
    assert docker("network", "ls", "--quiet", "--filter", label).split() == []
    # the volumes stay, as the README says: the log dirs outlive a stack unless removed
    volumes = docker("volume", "ls", "--quiet", "--filter", label).split()
    assert sorted(volumes) == [f"{STACK}_broker-{n}" for n in (1, 2, 3)] + [f"{STACK}_zookeeper-1"]
