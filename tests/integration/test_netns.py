"""A cluster in network namespaces (``cluster up --netns``) and the network faults it allows.

One three-broker cluster in namespaces serves the module: each network failure runs as a
scenario on it with acks=all, replication factor 3 and min.insync.replicas 2, and must lose
nothing acknowledged, converge, and leave no rule or qdisc behind. Commands killed in the middle
of a fault, and two networks made at once, must leave nothing of theirs either.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.integration.conftest import run_tidelog
from tidelog.cluster import netfaults
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.cluster.netns import NETWORK_FILE, ClusterNetwork, member_name, run_ip
from tidelog.cluster.scenario import SCENARIO_OVERRIDES, ScenarioSettings, run_scenario


@pytest.fixture(scope="module")
def namespaced(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("netns"))
    cluster.up(3, overrides=dict(SCENARIO_OVERRIDES), progress=lambda _: None, netns=True)
    yield cluster
    cluster.down(progress=lambda _: None)


def leftovers(token: str, subnet: str) -> list[str]:
    """Anything on the host that carries the cluster's token or subnet: namespaces, links,
    qdiscs, addresses, routes, and iptables rules in the host's own tables."""
    found = [line for line in run_ip("netns", "list").stdout.splitlines() if token in line]
    found += [line for line in run_ip("-o", "link", "show").stdout.splitlines() if token in line]
    qdiscs = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout
    found += [line for line in qdiscs.splitlines() if token in line]
    prefix = subnet.rsplit(".", 1)[0] + "."
    found += [line for line in run_ip("-o", "addr", "show").stdout.splitlines() if prefix in line]
    found += [line for line in run_ip("route", "show").stdout.splitlines() if prefix in line]
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    found += [line for line in rules.splitlines() if token in line or prefix in line]
    return found


def test_each_member_has_its_own_namespace_and_address_reached_from_the_host(namespaced):
    network = namespaced.network
    for broker_id in namespaced.broker_ids:
        broker = namespaced.broker(broker_id)
        member = member_name(broker_id)
        identified = run_ip("netns", "identify", str(broker.pid)).stdout.strip()
        assert identified == network.namespace(member)
        assert broker.host == network.address(member)
    zookeeper_pid = namespaced.state.zookeeper_process.pid
    assert run_ip("netns", "identify", str(zookeeper_pid)).stdout.strip() == network.namespace(
        "zookeeper"
    )
    # kcat on the host: the brokers' listeners and advertised addresses are their own
    servers = namespaced.bootstrap_servers
    assert "127.0.0.1" not in servers
    produced = subprocess.run(
        ["kcat", "-P", "-b", servers, "-t", "through-the-bridge", "-p", "0", "-X", "acks=all"],
        input="hello\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        ["kcat", "-C", "-b", servers, "-t", "through-the-bridge", "-e", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert consumed.stdout.split() == ["hello"], consumed.stderr


@pytest.mark.parametrize(
    ("failure", "message_format"),
    [
        ("partition", "0.9.0"),
        ("partition_zookeeper", "0.10.0"),
        ("partition_one_way", "0.10.0"),
        ("partition_halves", "0.9.0"),
        ("degraded", "0.10.0"),
    ],
)
def test_a_network_fault_loses_nothing_acknowledged_and_leaves_no_rule(
    namespaced, failure, message_format, tmp_path
):
    settings = ScenarioSettings(
        failure, "leader", message_format, rate=100, settle_seconds=1.0, link_loss=0.1
    )
    topic, report = asyncio.run(
        run_scenario(namespaced, settings, progress=lambda _: None, run_dir=tmp_path)
    )

    assert report.ok, f"{topic}:\n{report.table()}"
    assert report.acked > 100, report.table()
    # the producer is served again after the fault, and the run data says when
    verdict = json.loads((tmp_path / "metadata.json").read_text())["verdict"]
    (after_fault,) = verdict["availability"]["overall"]["served_again_after_fault_s"]
    assert after_fault is not None
    assert set(verdict["availability"]["partitions"]) == {"0", "1", "2"}
    assert len(verdict["availability"]["full_isr_after_s"]) == 1
    network = namespaced.network
    for member in network.members:
        assert netfaults.rules(network, member) == []
        assert netfaults.qdiscs(network, member) == []
    assert network.faults == []


def test_a_degraded_link_carries_no_more_than_its_rate(namespaced):
    """tbf both ways on the target's veth: 2 MB sent to the broker at 4 mbit (500 kB/s) take
    about 4 s; the same transfer to another broker a small part of that."""
    network = namespaced.network
    slowed, other = member_name(1), member_name(2)
    netfaults.degrade(network, slowed, "4mbit", 0.0)
    try:
        slow = _transfer_seconds(network, slowed, 2 << 20, timeout=60)
    finally:
        netfaults.heal(network)
    fast = _transfer_seconds(network, other, 2 << 20, timeout=60)

    assert slow > 3, slow
    assert fast < 1.5, fast


def test_a_lossy_link_drops_about_that_share_of_the_packets_it_receives(namespaced):
    """iptables statistic at 20%: of the packets reaching the broker's end during a transfer,
    the INPUT rule's counter holds about a fifth (TCP sends the dropped ones again)."""
    network = namespaced.network
    member = member_name(3)
    received_before = _received_packets(network, member)
    netfaults.degrade(network, member, "1gbit", 0.2)
    try:
        _transfer_seconds(network, member, 1 << 20, timeout=120)
        dropped = _input_drops(network, member)
    finally:
        netfaults.heal(network)
    received = _received_packets(network, member) - received_before

    assert 0.12 < dropped / received < 0.28, (dropped, received)


def _received_packets(network: ClusterNetwork, member: str) -> int:
    shown = run_ip("-n", network.namespace(member), "-j", "-s", "link", "show", "eth0").stdout
    return json.loads(shown)[0]["stats64"]["rx"]["packets"]


def _input_drops(network: ClusterNetwork, member: str) -> int:
    listed = subprocess.run(
        network.command(member, ["iptables", "-w", "-L", "INPUT", "-v", "-n", "-x"]),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (rule,) = [line for line in listed.splitlines() if "statistic" in line]
    return int(rule.split()[0])


def _transfer_seconds(network: ClusterNetwork, member: str, size: int, timeout: float) -> float:
    """Seconds to send ``size`` bytes over TCP from the host to a listener in the member's
    namespace (a Python one-liner run there with ip netns exec)."""
    receiver = (
        "import socket,sys\n"
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        f"s.bind(('{network.address(member)}', 7777)); s.listen(1); print('ready', flush=True)\n"
        "c,_=s.accept(); n=0\n"
        "while (b:=c.recv(65536)): n+=len(b)\n"
        "print(n, flush=True)\n"
    )
    process = subprocess.Popen(
        network.command(member, [sys.executable, "-c", receiver]),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        started = time.monotonic()
        with socket.create_connection((network.address(member), 7777), timeout=timeout) as sender:
            sender.sendall(b"x" * size)
        received = int(process.stdout.readline())
        elapsed = time.monotonic() - started
        assert received == size
        return elapsed
    finally:
        process.kill()
        process.wait()


def test_a_scenario_stopped_with_sigterm_mid_fault_heals_it(namespaced):
    """The scenario command on the module's cluster (--dir): SIGTERM while the leader is cut
    off; the command undoes the fault before it exits, and the cluster stays up."""
    network_file = namespaced.directory / NETWORK_FILE
    command = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tidelog.cli",
            "scenario",
            "replication",
            "--dir",
            str(namespaced.directory),
            "--failure",
            "partition",
            "--rate",
            "50",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(
            lambda: json.loads(network_file.read_text())["faults"],
            60,
            "the scenario to put its partition in place",
        )
        command.send_signal(signal.SIGTERM)
        command.wait(60)
    finally:
        command.kill()
    network = ClusterNetwork.load(namespaced.directory)

    assert network is not None and network.faults == []
    assert all(netfaults.rules(network, member) == [] for member in network.members)
    assert namespaced.running


def test_down_after_a_scenario_killed_mid_fault_leaves_nothing(tmp_path):
    """SIGKILL while a degraded link (rules in a namespace, qdiscs on both veth ends) is in
    place: the command undoes nothing, and ``cluster down`` removes all of it."""
    directory = tmp_path / "killed"
    command = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tidelog.cli",
            "scenario",
            "replication",
            "--netns",
            "--dir",
            str(directory),
            "--failure",
            "degraded",
            "--rate",
            "50",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: (
                (directory / NETWORK_FILE).exists()
                and json.loads((directory / NETWORK_FILE).read_text())["faults"]
            ),
            90,
            "the scenario to degrade a link",
        )
    finally:
        command.kill()
        command.wait()
    network = ClusterNetwork.load(directory)
    assert network is not None and leftovers(network.token, network.subnet)

    down = run_tidelog("cluster", "down", "--dir", str(directory), timeout=120)

    assert down.returncode == 0, down.stderr
    assert leftovers(network.token, network.subnet) == []
    assert not (directory / NETWORK_FILE).exists()


def test_two_networks_made_at_once_share_no_name_and_no_subnet(tmp_path):
    made: list[ClusterNetwork] = []

    def make(name: str) -> None:
        made.append(ClusterNetwork.create(tmp_path / name, ["zookeeper", "broker-1"]))

    threads = [threading.Thread(target=make, args=(name,)) for name in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        one, two = made
        assert one.token != two.token and one.subnet != two.subnet
        assert {e["name"] for e in one.created}.isdisjoint({e["name"] for e in two.created})
    finally:
        for network in made:
            network.destroy()
    for network in made:
        assert leftovers(network.token, network.subnet) == []


def test_down_removes_a_network_whose_up_was_killed_before_it_started_anything(tmp_path):
    network = ClusterNetwork.create(tmp_path, ["zookeeper", "broker-1"])

    down = run_tidelog("cluster", "down", "--dir", str(tmp_path))

    assert down.returncode == 0, down.stderr
    assert leftovers(network.token, network.subnet) == []


def test_without_root_the_command_says_so_and_makes_nothing():
    parent = Path(tempfile.mkdtemp(prefix="tidelog-unprivileged-"))  # one nobody may enter
    parent.chmod(0o777)
    directory = parent / "cluster"
    command = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-m",
            "tidelog.cli",
            "cluster",
            "up",
            "--netns",
            "--dir",
            str(directory),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )

    assert command.returncode == 2, command.stdout + command.stderr  # as every refused usage
    assert "--netns needs root" in command.stderr
    assert not directory.exists()
    shutil.rmtree(parent)
