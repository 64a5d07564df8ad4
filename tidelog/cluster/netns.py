"""A local cluster's own network: each member (ZooKeeper, every broker) in a network namespace,
joined by a veth pair to a bridge the cluster owns, on a /24 the cluster picked.

    DIR/network.json    the token, the subnet, and every namespace and link, each written down
                        before it is made, so that ``destroy`` (``cluster down``) removes all of
                        it even after the command that made it was killed

Names carry a random token (``tl{token}br`` the bridge, ``tl{token}-b1`` broker 1's namespace,
``tl{token}b1`` its veth's host end), checked unused when picked: two clusters on one machine
(pytest-xdist's workers) never share a name, and ``destroy`` touches only names it recorded.
The host holds the bridge's address (.1), so clients on the host reach every member directly;
ZooKeeper is .2 and broker N is .(10+N). Fault rules (netfaults.py) live inside the members'
namespaces and on their veths, so they go with them.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import random
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.files import replace_text

NETWORK_FILE = "network.json"
ZOOKEEPER = "zookeeper"
# Subnets are picked in 10.200.0.0/16-10.254.255.0/24, away from the usual private ranges a
# host's own networks and Docker's default pools (172.17-31, 192.168) take.
SUBNET_SECOND_OCTETS = range(200, 255)
LOCK_FILE = Path("/run/lock/tidelog-netns.lock")
TOOLS = ("ip", "iptables", "tc")


class NetworkError(RuntimeError):
    pass


def member_name(broker_id: int | None) -> str:
    """``zookeeper`` or ``broker-N``: a member's name in network.json."""
    return ZOOKEEPER if broker_id is None else f"broker-{broker_id}"


def _short(member: str) -> str:
    return "zk" if member == ZOOKEEPER else "b" + member.removeprefix("broker-")


def _host_number(member: str) -> int:
    return 2 if member == ZOOKEEPER else 10 + int(member.removeprefix("broker-"))


def run_ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``ip ARGS``, its output captured; a failure raises NetworkError with ip's own words."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done


def run_iptables(*args: str, check: bool = True) -> bool:
    """The host's ``iptables ARGS``; whether it succeeded (a failure with ``check`` raises
    NetworkError with iptables' own words)."""
    done = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"iptables {' '.join(args)}: {done.stderr.strip()}")
    return done.returncode == 0


def check_can_build() -> None:
    """Raises NetworkError saying what is missing: root, or one of the tools."""
    if os.geteuid() != 0:
        raise NetworkError(
            "--netns needs root: it makes network namespaces, veth pairs, a bridge and "
            "iptables rules (run the command as root)"
        )
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise NetworkError(
            f"--netns needs {', '.join(missing)}: run 'make install' (Debian's iproute2 and "
            "iptables)"
        )


def _host_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Every IPv4 network the host has an address in or a route to."""
    networks = []
    for entry in json.loads(run_ip("-j", "-4", "addr", "show").stdout or "[]"):
        for address in entry.get("addr_info", []):
            networks.append(
                ipaddress.ip_network(f"{address['local']}/{address['prefixlen']}", strict=False)
            )
    for route in json.loads(run_ip("-j", "-4", "route", "show", "table", "all").stdout or "[]"):
        destination = route.get("dst", "")
        if destination and destination != "default":
            with contextlib.suppress(ValueError):
                networks.append(ipaddress.ip_network(destination, strict=False))
    return networks


def _names_in_use() -> set[str]:
    links = {entry["ifname"] for entry in json.loads(run_ip("-j", "link", "show").stdout or "[]")}
    namespaces = {line.split()[0] for line in run_ip("netns", "list").stdout.splitlines() if line}
    return links | namespaces


@dataclass
class ClusterNetwork:
    """The namespaces, links and subnet of one cluster, as recorded in its directory.

    ``created`` lists every namespace and link in the order they were made, each entered (and
    saved) before the command that makes it runs: a name in it may not exist (the command
    failed or never ran), a name not in it is never touched."""

    directory: Path
    token: str
    subnet: str  # "10.231.17.0/24"
    members: list[str]
    created: list[dict[str, str]] = field(default_factory=list)
    faults: list[dict] = field(default_factory=list)  # see netfaults.py

    # -- names and addresses -------------------------------------------------------------------

    @property
    def bridge(self) -> str:
        return f"tl{self.token}br"

    def namespace(self, member: str) -> str:
        return f"tl{self.token}-{_short(member)}"

    def interface(self, member: str) -> str:
        """The member's end of its veth pair, in its namespace."""
        return "eth0"

    def host_link(self, member: str) -> str:
        """The host end of the member's veth pair (its end in the namespace: ``interface``)."""
        return f"tl{self.token}{_short(member)}"

    def address(self, member: str) -> str:
        return str(ipaddress.ip_network(self.subnet)[_host_number(member)])

    @property
    def zookeepers(self) -> list[str]:
        return [ZOOKEEPER]

    @property
    def host_address(self) -> str:
        return str(ipaddress.ip_network(self.subnet)[1])

    def command(self, member: str, argv: list[str]) -> list[str]:
        """``argv`` run inside the member's namespace (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.namespace(member), *argv]

    # -- record --------------------------------------------------------------------------------

    def save(self) -> None:
        document = {
            "token": self.token,
            "subnet": self.subnet,
            "members": self.members,
            "created": self.created,
            "faults": self.faults,
        }
        replace_text(self.directory / NETWORK_FILE, json.dumps(document, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path) -> ClusterNetwork | None:
        path = Path(directory) / NETWORK_FILE
        if not path.exists():
            return None
        document = json.loads(path.read_text())
        return cls(
            Path(directory),
            document["token"],
            document["subnet"],
            document["members"],
            document["created"],
            document.get("faults", []),
        )

    def _record(self, kind: str, name: str) -> None:
        self.created.append({"kind": kind, "name": name})
        self.save()

    # -- life cycle ----------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, members: list[str]) -> ClusterNetwork:
        """Picks a token and a free /24, and makes the bridge, one namespace per member and
        its veth pair. If anything fails, what was made is removed again."""
        check_can_build()
        directory.mkdir(parents=True, exist_ok=True)
        LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        # Two clusters starting at once must not pick one subnet: the pick and the bridge's
        # address (which makes the subnet taken for the next pick) happen under one lock.
        with open(LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            network = cls(directory, _free_token(members), _free_subnet(), members)
            try:
                network.save()
                network._make_bridge()
            except BaseException:
                network.destroy()
                raise
        try:
            for member in members:
                network._make_member(member)
        except BaseException:
            network.destroy()
            raise
        return network

    def _make_bridge(self) -> None:
        self._record("link", self.bridge)
        # nf_call_iptables 0: frames between two members are not handed to the host's
        # iptables (br_netfilter) on this bridge's account; faults are rules inside the
        # namespaces instead
        run_ip("link", "add", self.bridge, "type", "bridge", "nf_call_iptables", "0")
        prefix = ipaddress.ip_network(self.subnet).prefixlen
        run_ip("addr", "add", f"{self.host_address}/{prefix}", "dev", self.bridge)
        run_ip("link", "set", self.bridge, "up")
        # ... but where br_netfilter is loaded with net.bridge.bridge-nf-call-iptables=1 (a
        # running Docker engine does both), every bridge's frames go through the host's FORWARD
        # chain, whose policy Docker sets to DROP: one rule lets frames between this bridge's
        # members through, removed on down with the rest
        self._record("forward_rule", self.bridge)
        run_iptables("-I", "FORWARD", *self._forward_rule())

    def _forward_rule(self) -> list[str]:
        return [
            "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT",
            "-m", "comment", "--comment", f"tidelog cluster {self.token}",
        ]  # fmt: skip

    def _make_member(self, member: str) -> None:
        namespace, link = self.namespace(member), self.host_link(member)
        prefix = ipaddress.ip_network(self.subnet).prefixlen
        self._record("namespace", namespace)
        run_ip("netns", "add", namespace)
        self._record("link", link)
        run_ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        run_ip("link", "set", link, "master", self.bridge, "up")
        run_ip("-n", namespace, "addr", "add", f"{self.address(member)}/{prefix}", "dev", "eth0")
        run_ip("-n", namespace, "link", "set", "eth0", "up")
        run_ip("-n", namespace, "link", "set", "lo", "up")

    def existing(self) -> list[dict[str, str]]:
        """What of the recorded namespaces and links exists now."""
        in_use = _names_in_use()
        return [
            entry
            for entry in self.created
            if entry["kind"] in ("namespace", "link") and entry["name"] in in_use
        ]

    def destroy(self, timeout: float = 10.0, progress=lambda _: None) -> None:
        """Removes every recorded namespace and link that exists, in reverse order, after
        killing what still runs inside its namespaces (only this cluster's processes can be
        there), and waits until the kernel has let them all go."""
        for entry in self.created:
            if entry["kind"] == "forward_rule":
                progress(f"removing the FORWARD rule of bridge {entry['name']}")
                while run_iptables("-D", "FORWARD", *self._forward_rule(), check=False):
                    pass
        for entry in reversed(self.existing()):
            if entry["kind"] == "namespace":
                pids = run_ip("netns", "pids", entry["name"], check=False).stdout.split()
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), 9)
                progress(f"removing network namespace {entry['name']}")
                run_ip("netns", "del", entry["name"], check=False)
            else:
                progress(f"removing link {entry['name']}")
                run_ip("link", "del", entry["name"], check=False)
        deadline = time.monotonic() + timeout
        while left := self.existing():
            if time.monotonic() > deadline:
                names = ", ".join(entry["name"] for entry in left)
                raise NetworkError(f"still there {timeout} s after removing them: {names}")
            for entry in left:  # a veth whose namespace went is removed with it, a bit later
                if entry["kind"] == "link":
                    run_ip("link", "del", entry["name"], check=False)
            time.sleep(0.1)
        self.faults = []
        (self.directory / NETWORK_FILE).unlink(missing_ok=True)


def _free_token(members: list[str]) -> str:
    in_use = _names_in_use()
    for _ in range(100):
        token = secrets.token_hex(3)
        probe = ClusterNetwork(Path("."), token, "10.0.0.0/24", members)
        names = {probe.bridge} | {probe.namespace(m) for m in members}
        names |= {probe.host_link(m) for m in members}
        if not names & in_use:
            return token
    raise NetworkError("found no unused network names in 100 tries")


def _free_subnet() -> str:
    """A /24 in 10.200-254.x that no address or route of the host overlaps."""
    taken = _host_networks()
    candidates = [(second, third) for second in SUBNET_SECOND_OCTETS for third in range(256)]
    random.shuffle(candidates)
    for second, third in candidates:
        subnet = ipaddress.ip_network(f"10.{second}.{third}.0/24")
        if not any(subnet.overlaps(network) for network in taken):
            return str(subnet)
    raise NetworkError("no free /24 in 10.200.0.0-10.254.255.255")
