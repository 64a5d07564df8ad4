"""The members of a compose project or a Swarm stack (on this node) as the network faults
(netfaults.py) act on them: each container's network namespace, entered from the host with
``nsenter`` through the container's process, its end of the veth pair (``eth0``) and the host's
end on the engine's bridge (a stack's overlay has its end elsewhere: no ``degraded`` there).

The rules and qdiscs go in with the host's own ``iptables`` and ``tc`` (only the network
namespace is the container's), so the images need neither. All rules in a container's namespace
are the fault's own: the engine writes its NAT and forwarding rules in the host's namespace, not
in the container's. Every fault is recorded in ``network-faults.json`` in the cluster's directory
before its first rule goes in; ``heal`` undoes what is recorded, and removing the containers
(``cluster down``) removes their namespaces and veth pairs with everything in them.
"""

from __future__ import annotations

import json
import re
import subprocess

from tidelog.cluster.engine import EngineCluster
from tidelog.cluster.netns import NetworkError
from tidelog.files import replace_text

FAULTS_FILE = "network-faults.json"
LINK = re.compile(r"^\d+: ([^@:]+)@if(\d+):")


class ContainerNetwork:
    """The network of one compose project or stack, its members named as its services
    (``zookeeper``, ``broker-N``). ``faults`` is what network-faults.json holds: the faults
    injected and not yet healed."""

    def __init__(self, cluster: EngineCluster) -> None:
        self.cluster = cluster
        self.path = cluster.directory / FAULTS_FILE
        self.faults: list[dict] = (
            json.loads(self.path.read_text())["faults"] if self.path.exists() else []
        )

    @property
    def zookeepers(self) -> list[str]:
        """The ZooKeeper members: the one server, or the ensemble's three."""
        return self.cluster.zookeeper_members

    def _inspect(self, member: str) -> dict:
        return self.cluster.inspect_member(member)

    def command(self, member: str, argv: list[str]) -> list[str]:
        """``argv`` run in the container's network namespace (and nothing else of it)."""
        pid = self._inspect(member)["State"]["Pid"]
        if not pid:
            raise NetworkError(f"{member}: its container does not run, no namespace to enter")
        return ["nsenter", f"--net=/proc/{pid}/ns/net", *argv]

    def address(self, member: str) -> str:
        """The container's address on the project's network."""
        networks = self._inspect(member)["NetworkSettings"]["Networks"]
        network = networks.get(self.cluster.network)
        if not network or not network.get("IPAddress"):
            raise NetworkError(f"{member} has no address on {self.cluster.network}")
        return str(network["IPAddress"])

    def interface(self, member: str) -> str:
        """The container's interface that holds its address on the project's network."""
        address = self.address(member)
        shown = _output(self.command(member, ["ip", "-o", "-4", "addr", "show"]))
        for line in shown.splitlines():
            fields = line.split()
            if len(fields) > 3 and fields[3].split("/")[0] == address:
                return fields[1]
        raise NetworkError(f"{member}: no interface holds its address {address}")

    def host_link(self, member: str) -> str:
        """The host's end of the container's veth pair: the link whose index the container's
        interface names as its peer."""
        interface = self.interface(member)
        shown = _output(self.command(member, ["ip", "-o", "link", "show", interface]))
        found = LINK.match(shown)
        if found is None:
            raise NetworkError(f"{member}: its {interface} is not one end of a veth pair")
        host = _output(["ip", "-o", "link", "show"])
        for line in host.splitlines():
            index, _, rest = line.partition(": ")
            if index == found[2]:
                return rest.split(":", 1)[0].split("@", 1)[0]
        raise NetworkError(f"{member}: no link with index {found[2]} on the host")

    def save(self) -> None:
        replace_text(self.path, json.dumps({"faults": self.faults}, indent=2) + "\n")


def _output(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout
