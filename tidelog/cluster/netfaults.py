"""Network faults between the members of a cluster: iptables rules and tc qdiscs inside a
member's network namespace and on the host's end of its veth, after Trogdor's
NetworkPartitionFault and DegradedNetworkFault. The members are a local cluster's namespaces
(netns.py) or a compose project's containers (container_network.py).

Every fault is written into the cluster's record (network.json, network-faults.json) before its
first rule goes in, and ``heal`` removes
every rule and qdisc of every member a recorded fault touched: all rules in a member's namespace
are the cluster's own (it made the namespace), so healing flushes them. A killed command leaves
its faults recorded; ``heal`` (or removing the namespaces, ``cluster down``) undoes them.

Delay is not offered: the netem qdisc is not in this kernel, tbf's ``latency`` bounds how long a
packet may wait in its queue (it drops, it does not delay), and a user-space queue (NFQUEUE)
would add a Python process's own scheduling to every packet it holds.
"""

from __future__ import annotations

import subprocess
from typing import Protocol

from tidelog.cluster.netns import NetworkError


class FaultNetwork(Protocol):
    """What the faults need of a cluster's network: a local cluster's namespaces
    (netns.ClusterNetwork) or a compose project's containers (container_network.py). Members
    are named ``zookeeper`` and ``broker-N``; every member's namespace is the cluster's own, so
    its rules are the faults' only."""

    faults: list[dict]

    @property
    def zookeepers(self) -> list[str]: ...

    def command(self, member: str, argv: list[str]) -> list[str]: ...

    def address(self, member: str) -> str: ...

    def host_link(self, member: str) -> str: ...

    def interface(self, member: str) -> str: ...

    def save(self) -> None: ...


# tbf's bucket: enough for a few full-size packets at any rate, so a low rate still passes
# them, and a queue of at most this long before tbf drops (a slow link, not a dead one).
TBF_BURST = "32kb"
TBF_LATENCY = "400ms"


def _run(argv: list[str], check: bool = True) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")


def _iptables(network: FaultNetwork, member: str, *rule: str) -> None:
    _run(network.command(member, ["iptables", "-w", "-A", *rule]))


def _record(network: FaultNetwork, kind: str, members: list[str], summary: str) -> None:
    network.faults.append({"kind": kind, "members": sorted(set(members)), "summary": summary})
    network.save()


def cut(network: FaultNetwork, member: str, peers: list[str] | None = None) -> str:
    """Drops every packet between ``member`` and ``peers`` (members' names), both ways; with no
    peers, between ``member`` and anyone (the host's clients too)."""
    what = "everyone" if peers is None else ", ".join(peers)
    summary = f"{member} cut from {what}"
    _record(network, "cut", [member], summary)
    if peers is None:
        interface = network.interface(member)
        _iptables(network, member, "INPUT", "-i", interface, "-j", "DROP")
        _iptables(network, member, "OUTPUT", "-o", interface, "-j", "DROP")
    for peer in peers or []:
        _iptables(network, member, "INPUT", "-s", network.address(peer), "-j", "DROP")
        _iptables(network, member, "OUTPUT", "-d", network.address(peer), "-j", "DROP")
    return summary


def cut_one_way(network: FaultNetwork, source: str, destinations: list[str]) -> str:
    """Drops the packets ``source`` sends to each of ``destinations``; theirs still arrive."""
    summary = f"packets from {source} to {', '.join(destinations)} dropped (not back)"
    _record(network, "one_way", [source], summary)
    for destination in destinations:
        _iptables(network, source, "OUTPUT", "-d", network.address(destination), "-j", "DROP")
    return summary


def split(network: FaultNetwork, side: list[str], other_side: list[str]) -> str:
    """Two groups that reach no one of the other group; both still reach the host."""
    summary = f"{', '.join(side)} | {', '.join(other_side)}"
    _record(network, "split", side, summary)
    for member in side:
        for peer in other_side:
            _iptables(network, member, "INPUT", "-s", network.address(peer), "-j", "DROP")
            _iptables(network, member, "OUTPUT", "-d", network.address(peer), "-j", "DROP")
    return summary


def degrade(network: FaultNetwork, member: str, rate: str, loss: float) -> str:
    """The member's link, both ways, limited to ``rate`` (tc's units: 1mbit, 500kbit) with a
    token bucket, and each packet dropped with probability ``loss`` (iptables statistic)."""
    if not 0 <= loss < 1:
        raise NetworkError(f"loss {loss}: allowed: a probability from 0 up to (not including) 1")
    summary = f"{member}'s link limited to {rate}, {loss:.0%} of packets dropped each way"
    _record(network, "degraded", [member], summary)
    shaping = ["root", "tbf", "rate", rate, "burst", TBF_BURST, "latency", TBF_LATENCY]
    # what the member sends: its end of the pair; what it receives: the host's end
    interface = network.interface(member)
    _run(network.command(member, ["tc", "qdisc", "add", "dev", interface, *shaping]))
    _run(["tc", "qdisc", "add", "dev", network.host_link(member), *shaping])
    if loss > 0:
        for chain, option in (("INPUT", "-i"), ("OUTPUT", "-o")):
            _iptables(
                network,
                member,
                chain,
                option,
                interface,
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                f"{loss:.4f}",
                "-j",
                "DROP",
            )
    return summary


def heal(network: FaultNetwork) -> list[str]:
    """Removes every rule and qdisc of the members the recorded faults touched; returns the
    summaries of the faults undone."""
    members = sorted({member for fault in network.faults for member in fault["members"]})
    for member in members:
        try:
            network.command(member, [])
        except NetworkError:
            continue  # a container that stopped: its namespace, and all in it, went with it
        for chain in ("INPUT", "OUTPUT"):
            _run(network.command(member, ["iptables", "-w", "-F", chain]))
        # no qdisc of ours there: tc says so, and that is fine
        interface = network.interface(member)
        _run(network.command(member, ["tc", "qdisc", "del", "dev", interface, "root"]), check=False)
        try:
            host_link = network.host_link(member)
        except NetworkError:  # a stack's overlay: its end is not on the host, nor a qdisc of ours
            continue
        _run(["tc", "qdisc", "del", "dev", host_link, "root"], check=False)
    undone = [fault["summary"] for fault in network.faults]
    network.faults = []
    network.save()
    return undone


def rules(network: FaultNetwork, member: str) -> list[str]:
    """The iptables rules in the member's namespace (``iptables -S``, policies left out)."""
    done = subprocess.run(
        network.command(member, ["iptables", "-w", "-S"]), capture_output=True, text=True
    )
    return [line for line in done.stdout.splitlines() if not line.startswith("-P ")]


def qdiscs(network: FaultNetwork, member: str) -> list[str]:
    """Non-default qdiscs on the member's two veth ends."""
    found = []
    for argv in (
        network.command(member, ["tc", "qdisc", "show", "dev", network.interface(member)]),
        ["tc", "qdisc", "show", "dev", network.host_link(member)],
    ):
        shown = subprocess.run(argv, capture_output=True, text=True).stdout.splitlines()
        found += [line for line in shown if line.split()[1:2] in (["tbf"], ["htb"])]
    return found
