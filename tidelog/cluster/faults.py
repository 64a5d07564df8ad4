"""Faults a scenario injects into a LocalCluster, a ComposeCluster or a SwarmCluster (the last two
through the engine, ``tidelog.cluster.engine``), each followed by a wait for recovery."""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tidelog.cluster import disks, netfaults, power
from tidelog.cluster.compose import CONTAINER_LOG_DIR, ComposeCluster
from tidelog.cluster.container_network import ContainerNetwork
from tidelog.cluster.engine import EngineCluster
from tidelog.cluster.local import ClusterError, LocalCluster, wait_until
from tidelog.cluster.netns import member_name
from tidelog.cluster.swarm import SwarmCluster
from tidelog.config import read_properties
from tidelog.controller import zookeeper

FAILURES = (
    "clean_shutdown",
    "hard_shutdown",
    "clean_bounce",
    "hard_bounce",
    "pause",
    "clock_skew",
    "zk_session_expiry",
    "truncation_failover",
    "network_partition",
    "wipe_and_rebuild",
    "partition",
    "partition_zookeeper",
    "partition_one_way",
    "partition_halves",
    "degraded",
    "power_loss",
    "disk_full",
    "disk_errors",
)
# Failures between the members of a cluster in network namespaces (cluster up --netns), or of
# a compose cluster's containers.
NETWORK_FAILURES = (
    "partition",
    "partition_zookeeper",
    "partition_one_way",
    "partition_halves",
    "degraded",
)
# Failures a Swarm stack does not take: a task's disk is its node's, out of this host's reach.
NOT_ON_A_STACK = ("disk_full", "disk_errors")
TARGETS = ("leader", "follower", "controller", "replicas")  # replicas: power_loss only
# how long a compose broker recreated by a disk fault may take to be healthy again
RECREATE_TIMEOUT_S = 180.0
CLOCK_SKEW_MS = -120_000

# What the faults act on: processes on this host, or containers of a compose project or a stack.
Cluster = LocalCluster | ComposeCluster | SwarmCluster


def _zookeeper_read(cluster: Cluster, read):
    with zookeeper.session(cluster.zookeeper) as client:
        return read(client)


def pick_target(cluster: Cluster, topic: str, target: str) -> int:
    """The broker to hit: partition 0's leader or a follower of ``topic``, or the controller."""
    if target == "controller":
        broker = _zookeeper_read(cluster, zookeeper.read_controller)
    else:
        metadata = _zookeeper_read(cluster, lambda zk: zookeeper.read_topic(zk, topic))
        state = metadata.states[0]
        if target == "leader":
            broker = state.leader
        else:
            broker = next((r for r in metadata.assignment[0] if r != state.leader), -1)
    if broker < 0:
        raise ClusterError(f"no {target} to hit for {topic}")
    return broker


def pick_targets(cluster: Cluster, topic: str, target: str) -> list[int]:
    """The brokers to hit: ``replicas`` is every replica of partition 0, any other target one
    broker (``pick_target``)."""
    if target != "replicas":
        return [pick_target(cluster, topic, target)]
    metadata = _zookeeper_read(cluster, lambda zk: zookeeper.read_topic(zk, topic))
    return sorted(metadata.assignment[0])


def _holds_anything(zk, broker_id: int) -> bool:
    """Whether ``broker_id`` is registered or leads any partition."""
    if broker_id in zookeeper.read_brokers(zk):
        return True
    for topic in zk.get_children(zookeeper.TOPICS):
        metadata = zookeeper.read_topic(zk, topic)
        if metadata and any(s.leader == broker_id for s in metadata.states.values()):
            return True
    return False


def set_clock_skew(cluster: Cluster, broker_id: int, skew_ms: int) -> None:
    broker = cluster.broker(broker_id)
    request = urllib.request.Request(
        f"http://{broker.admin_host}:{broker.admin_port}/clock",
        data=json.dumps({"skew_ms": skew_ms}).encode(),
        method="PUT",
    )
    with urllib.request.urlopen(request, timeout=5):
        pass


@dataclass(frozen=True)
class LinkSettings:
    """What ``degraded`` does to a link: tc's rate (1mbit, 500kbit) and a drop probability."""

    rate: str = "1mbit"
    loss: float = 0.05


def network_of(cluster: Cluster, failure: str) -> netfaults.FaultNetwork:
    if isinstance(cluster, EngineCluster):
        return ContainerNetwork(cluster)
    network = cluster.network
    if network is None:
        raise ClusterError(
            f"{failure} needs a local cluster in network namespaces ('cluster up --netns', or "
            "the scenario's --netns), or a compose cluster (--compose)"
        )
    return network


def inject_network(
    cluster: Cluster, failure: str, broker_id: int, *, hold_s: float, link: LinkSettings
) -> str:
    """A network fault around ``broker_id``, held for ``hold_s``, then healed (also when the
    hold is interrupted); returns what was done, in words."""
    if isinstance(cluster, EngineCluster) and failure == "partition":
        cluster.partition_broker(broker_id)
        try:
            time.sleep(hold_s)
        finally:
            cluster.heal_broker(broker_id)
        return (
            f"cut broker {broker_id} off the cluster's network for {hold_s:.0f} s, then healed it"
        )
    network = network_of(cluster, failure)
    member = member_name(broker_id)
    others = [member_name(b) for b in cluster.broker_ids if b != broker_id]
    try:
        if failure == "partition":
            done = netfaults.cut(network, member)
        elif failure == "partition_zookeeper":
            done = netfaults.cut(network, member, network.zookeepers)
        elif failure == "partition_one_way":
            done = netfaults.cut_one_way(network, member, others)
        elif failure == "partition_halves":
            # the target with ZooKeeper and as many brokers as make up half, the rest apart
            side = [member, *others[: len(cluster.broker_ids) // 2 - 1]]
            done = netfaults.split(network, [*side, *network.zookeepers], others[len(side) - 1 :])
        elif failure == "degraded":
            done = netfaults.degrade(network, member, link.rate, link.loss)
        else:
            raise ClusterError(f"{failure} is not a network failure")
        time.sleep(hold_s)
    finally:
        netfaults.heal(network)
    return f"{done} for {hold_s:.0f} s, then healed"


def inject(
    cluster: Cluster,
    failure: str,
    broker_id: int,
    *,
    session_timeout_s: float,
    lag_s: float,
    link: LinkSettings | None = None,
) -> str:
    """Injects ``failure`` on ``broker_id`` and brings it back; returns what was done, in words."""
    if failure in NETWORK_FAILURES:
        return inject_network(
            cluster, failure, broker_id, hold_s=session_timeout_s + 2, link=link or LinkSettings()
        )
    if failure == "clean_shutdown":
        cluster.stop_broker(broker_id)
        time.sleep(session_timeout_s)
        cluster.start_broker(broker_id)
        return f"stopped broker {broker_id} cleanly, ran without it, started it"
    if failure == "hard_shutdown":
        cluster.signal_broker(broker_id, signal.SIGKILL)
        time.sleep(session_timeout_s + 2)
        cluster.start_broker(broker_id)
        return f"killed broker {broker_id}, ran without it past its session timeout, started it"
    if failure == "clean_bounce":
        cluster.stop_broker(broker_id)
        cluster.start_broker(broker_id)
        return f"restarted broker {broker_id} cleanly"
    if failure == "hard_bounce":
        cluster.signal_broker(broker_id, signal.SIGKILL)
        cluster.start_broker(broker_id)
        return f"killed and restarted broker {broker_id}"
    if failure == "pause":
        cluster.signal_broker(broker_id, signal.SIGSTOP)
        time.sleep(lag_s + 1)
        cluster.signal_broker(broker_id, signal.SIGCONT)
        return f"paused broker {broker_id} for {lag_s + 1:.0f} s (past replica.lag.time.max.ms)"
    if failure == "zk_session_expiry":
        cluster.signal_broker(broker_id, signal.SIGSTOP)
        time.sleep(session_timeout_s + 2)
        cluster.signal_broker(broker_id, signal.SIGCONT)
        return f"paused broker {broker_id} past its ZooKeeper session timeout"
    if failure == "clock_skew":
        others = [b for b in cluster.broker_ids if b != broker_id]
        for other in others:
            set_clock_skew(cluster, other, CLOCK_SKEW_MS)
        cluster.signal_broker(broker_id, signal.SIGKILL)
        time.sleep(session_timeout_s + 2)
        cluster.start_broker(broker_id)
        for other in others:
            set_clock_skew(cluster, other, 0)
        return (
            f"set the clocks of brokers {others} {-CLOCK_SKEW_MS // 1000} s behind, killed "
            f"broker {broker_id} so that one of them took over, restarted it"
        )
    if failure == "network_partition":
        if not isinstance(cluster, EngineCluster):
            raise ClusterError(
                "network_partition needs a compose cluster or a stack (--compose, --swarm)"
            )
        cluster.partition_broker(broker_id)
        time.sleep(session_timeout_s + 2)
        cluster.heal_broker(broker_id)
        return f"cut broker {broker_id} off the network past its session timeout, then healed it"
    if failure == "wipe_and_rebuild":
        log_dirs = kill_and_wipe(cluster, broker_id, session_timeout_s=session_timeout_s)
        cluster.start_broker(broker_id)
        return (
            f"killed broker {broker_id}, wiped its log dirs {log_dirs}, started it to rebuild "
            "from its leaders (with tiered storage: the local part only)"
        )
    if failure == "disk_full":
        return disk_full(cluster, broker_id)
    if failure == "power_loss":
        return power_loss(
            cluster, [broker_id], session_timeout_s=session_timeout_s, rng=random.Random()
        )
    if failure == "truncation_failover":
        raise ClusterError("truncation_failover picks its own brokers: call truncation_failover")
    raise ClusterError(f"unknown failure {failure!r}; known: {', '.join(FAILURES)}")


def power_loss(
    cluster: Cluster, broker_ids: list[int], *, session_timeout_s: float, rng: random.Random
) -> str:
    """The machines of ``broker_ids`` lose power at once: each broker is killed (SIGKILL; a
    compose broker's container frozen, and killed once its volume's files are cut), and
    once the cluster has seen them gone (their sessions expired, and, while other brokers
    live, their leadership moved) every segment and index file is cut back to what the kernel
    had written to the disk plus a random part of the rest (power.py); then they start again."""
    # a compose broker is frozen, not killed, until its files are cut: a container's exit
    # unmounts its overlay, which syncs the filesystem the volumes are on as well
    stop = signal.SIGSTOP if isinstance(cluster, EngineCluster) else signal.SIGKILL
    for broker_id in broker_ids:
        cluster.signal_broker(broker_id, stop)
    survivors = [b for b in cluster.broker_ids if b not in broker_ids and cluster.broker(b).alive]

    def gone(zk) -> bool:
        if survivors:
            return not any(_holds_anything(zk, b) for b in broker_ids)
        return not set(broker_ids) & set(zookeeper.read_brokers(zk))

    wait_until(
        lambda: _zookeeper_read(cluster, gone),
        session_timeout_s * 3 + 10,
        f"the cluster to see brokers {broker_ids} gone",
        interval=0.2,
    )
    cuts: list[power.Cut] = []
    for broker_id in broker_ids:
        cuts += power.lose_unwritten(broker_log_dirs(cluster, broker_id), rng)
    if isinstance(cluster, EngineCluster):
        for broker_id in broker_ids:
            cluster.kill_paused(broker_id)
    for broker_id in broker_ids:
        cluster.start_broker(broker_id, wait=False)
    cluster.wait_registered(broker_ids)
    dropped = sum(cut.size - cut.kept for cut in cuts)
    return (
        f"power loss of brokers {broker_ids}: killed, {len(cuts)} files cut back to what was on "
        f"the disk ({dropped} bytes dropped), restarted"
    )


def broker_log_dirs(cluster: Cluster, broker_id: int) -> list[Path]:
    """Where the broker's log dirs are on this host: its log.dirs, or a compose broker's
    volume (the same page cache: the kernel is the host's)."""
    if isinstance(cluster, EngineCluster):
        return cluster.log_dirs(broker_id)
    return [
        Path(d) for d in read_properties(cluster.broker(broker_id).config)["log.dirs"].split(",")
    ]


HALTED = "Halting due to unrecoverable I/O error"


def not_on_a_stack(failure: str) -> ClusterError:
    return ClusterError(
        f"{failure} is not available on a Swarm stack (--swarm): failures it takes are those "
        f"of --failure but {', '.join(NOT_ON_A_STACK)}; {failure} runs on a compose cluster "
        "(--compose) or a local one"
    )


def disk_full(
    cluster: Cluster, broker_id: int, *, headroom: int = 64 << 10, timeout: float = 120
) -> str:
    """The broker's log dir moved onto a small filesystem with ``headroom`` bytes free (a clean
    restart), produced to until a write fails with ENOSPC and the broker halts, then its log
    dir (what it wrote) back on the big disk and the broker started again, to recover."""
    if isinstance(cluster, ComposeCluster):
        return _container_disk_full(cluster, broker_id, headroom=headroom, timeout=timeout)
    if isinstance(cluster, SwarmCluster):
        raise not_on_a_stack("disk_full")
    log_dirs = read_properties(cluster.broker(broker_id).config)["log.dirs"].split(",")
    if len(log_dirs) != 1:
        raise ClusterError(f"disk_full needs a broker with one log dir; {broker_id} has {log_dirs}")
    log_path = cluster.broker(broker_id).log_path
    halts_before = log_path.read_text(errors="replace").count(HALTED)
    cluster.stop_broker(broker_id)
    disk = None
    try:
        disk = disks.make_small(cluster.directory, Path(log_dirs[0]), headroom)
        cluster.start_broker(broker_id)
        wait_until(
            lambda: not cluster.broker(broker_id).alive,
            timeout,
            f"broker {broker_id} to fill its {headroom} bytes and halt",
            interval=0.2,
        )
    finally:
        if cluster.broker(broker_id).alive:
            cluster.signal_broker(broker_id, signal.SIGKILL)
        if disk is not None:
            disks.restore(cluster.directory, disk)
    halted = log_path.read_text(errors="replace").count(HALTED) > halts_before
    cluster.start_broker(broker_id)
    how = "halted on its I/O error" if halted else "exited WITHOUT the halt's log line"
    return (
        f"broker {broker_id} restarted on a filesystem with {headroom} bytes free, filled it and "
        f"{how}; started again on the big disk with what it wrote"
    )


LOG_DIR_MOUNT_WAIT_S = 120  # how long a recreated broker waits for its small disk


def _container_disk_full(
    cluster: ComposeCluster, broker_id: int, *, headroom: int, timeout: float
) -> str:
    """``disk_full`` on a compose broker: stopped cleanly, its volume copied onto a small ext4
    image, its container recreated to wait for a mount over its log dir, the image mounted
    there in the container's mount namespace (disks.py), and once the broker halted (or after
    ``timeout``, killed) what it wrote copied back into its volume and its container recreated
    as it was."""
    service = cluster.broker(broker_id).service
    (volume,) = cluster.log_dirs(broker_id)
    cluster.stop_broker(broker_id)
    halted = False
    try:
        disk = disks.make_small_volume(cluster.directory, service, volume, headroom)
        cluster.set_fault_environment(
            broker_id, {"TIDELOG_WAIT_FOR_LOG_DIR_MOUNT": str(LOG_DIR_MOUNT_WAIT_S)}
        )
        cluster.recreate_broker(broker_id, wait=False)
        disks.mount_in_container(
            cluster.directory, disk, cluster.broker_pid(broker_id), CONTAINER_LOG_DIR
        )
        wait_until(
            lambda: not cluster.broker(broker_id).alive,
            timeout,
            f"broker {broker_id} to fill its {headroom} bytes and halt",
            interval=0.5,
        )
        halted = HALTED in cluster.broker_log(broker_id)
    finally:
        if cluster.broker(broker_id).alive:  # its mount and loop device go with the container
            cluster.signal_broker(broker_id, signal.SIGKILL)
        cluster.set_fault_environment(broker_id, {})
        disks.release_volume_disks(cluster.directory)
    if not cluster.has_container(broker_id):
        raise ClusterError(f"broker {broker_id}'s compose project was taken down during disk_full")
    cluster.recreate_broker(broker_id, timeout=RECREATE_TIMEOUT_S)
    how = "halted on its I/O error" if halted else "exited WITHOUT the halt's log line"
    return (
        f"broker {broker_id}'s container recreated on a filesystem with {headroom} bytes free, "
        f"it filled it and {how}; recreated on its volume with what it wrote"
    )


# libfiu's failure points (Debian's fiu-utils) for a broker's disk operations: a broker reads and
# writes its segments and indexes with pread and pwrite, which no socket uses, so failing them
# fails the log dir's I/O and nothing else; fsync is the disk's alone too. A fetch answer larger
# than the broker copies (server.py's INLINE_SLICE_BYTES) goes out by sendfile, which libfiu does
# not wrap: its reads by the kernel do not fail.
DISK_ERROR_POINTS = {
    "write": "posix/io/rw/pwrite",
    "read": "posix/io/rw/pread",
    "fsync": "posix/io/sync/fsync",
}
EIO = 5
FIU_CONTROL_TIMEOUT_S = 10


@dataclass(frozen=True)
class DiskErrorSettings:
    """Which operations fail (of DISK_ERROR_POINTS), and the probability each call fails."""

    operations: tuple[str, ...] = ("write", "fsync")
    probability: float = 0.02


def _fiu_control(
    prefix: Path, pid: int, command: str, alive: Callable[[], bool], through: tuple[str, ...] = ()
) -> None:
    """``command`` to the broker's libfiu (``through``: the command line that runs fiu-ctrl
    where the broker is, ``docker exec`` in its container). A broker that halted (a failure
    the previous command enabled may stop it at once) no longer reads its control FIFO, and
    fiu-ctrl would wait on it for ever: so not sent to a broker that is gone, and given up on
    after FIU_CONTROL_TIMEOUT_S if the broker went while it waited."""
    if not alive():
        return
    try:
        done = subprocess.run(
            [*through, "fiu-ctrl", "-f", str(prefix), "-c", command, str(pid)],
            capture_output=True,
            text=True,
            check=False,
            timeout=FIU_CONTROL_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        if not alive():
            return
        raise ClusterError(
            f"fiu-ctrl {command}: no answer in {FIU_CONTROL_TIMEOUT_S} s from broker pid {pid}"
        ) from None
    if done.returncode != 0 and alive():
        raise ClusterError(f"fiu-ctrl {command}: {done.stderr.strip() or done.stdout.strip()}")


def disk_errors(
    cluster: Cluster,
    broker_id: int,
    topic: str,
    settings: DiskErrorSettings,
    *,
    hold_s: float,
) -> str:
    """The broker restarted (cleanly) under libfiu's POSIX preload and, once every replica is
    in sync again and it leads again what it led (a preferred election), its disk operations
    failed with EIO at ``settings.probability`` for up to
    ``hold_s``: a failed write halts it (Kafka 0.10's answer). Then it starts again without
    the preload (stopped cleanly first if it did not halt), to recover."""
    unknown = [op for op in settings.operations if op not in DISK_ERROR_POINTS]
    if unknown or not 0 < settings.probability <= 1:
        raise ClusterError(
            f"disk errors {settings}: allowed operations {', '.join(DISK_ERROR_POINTS)}, "
            "a probability above 0 up to 1"
        )
    if isinstance(cluster, ComposeCluster):
        return _container_disk_errors(cluster, broker_id, topic, settings, hold_s=hold_s)
    if isinstance(cluster, SwarmCluster):
        raise not_on_a_stack("disk_errors")
    if shutil.which("fiu-run") is None:
        raise ClusterError("disk_errors needs libfiu: run 'make install' (Debian's fiu-utils)")
    prefix = Path(cluster.broker(broker_id).config).parent / "fiu-ctrl"
    log_path = cluster.broker(broker_id).log_path
    halts_before = log_path.read_text(errors="replace").count(HALTED)
    led = _led_by(cluster, topic, broker_id)
    cluster.stop_broker(broker_id)
    cluster.start_broker(broker_id, launcher=["fiu-run", "-x", "-f", str(prefix)])
    wait_for_full_isr(cluster, topic)
    if led:
        _lead_again(cluster, topic, broker_id, led)
    pid = cluster.broker(broker_id).pid
    assert pid is not None

    def alive() -> bool:
        return cluster.broker(broker_id).alive

    for operation in settings.operations:
        _fiu_control(
            prefix,
            pid,
            f"enable_random name={DISK_ERROR_POINTS[operation]},"
            f"probability={settings.probability},failinfo={EIO}",
            alive,
        )
    deadline = time.monotonic() + hold_s
    while cluster.broker(broker_id).alive and time.monotonic() < deadline:
        time.sleep(0.1)
    halted = log_path.read_text(errors="replace").count(HALTED) > halts_before
    if cluster.broker(broker_id).alive:
        for operation in settings.operations:
            _fiu_control(prefix, pid, f"disable name={DISK_ERROR_POINTS[operation]}", alive)
        cluster.stop_broker(broker_id)
    cluster.start_broker(broker_id)
    operations = "/".join(settings.operations)
    outcome = "halted on an I/O error" if halted else f"ran {hold_s:.0f} s without halting"
    return (
        f"broker {broker_id}'s {operations} calls failed with EIO at p={settings.probability}: "
        f"it {outcome}; restarted without the errors"
    )


# where a compose broker's libfiu makes its control FIFOs (FIU_CONTAINER_PREFIX-1.in, .out: the
# broker is its container's first process), in the image's home of the tidelog user
FIU_CONTAINER_PREFIX = "/var/lib/tidelog/fiu-ctrl"


def _container_disk_errors(
    cluster: ComposeCluster,
    broker_id: int,
    topic: str,
    settings: DiskErrorSettings,
    *,
    hold_s: float,
) -> str:
    """``disk_errors`` on a compose broker: its container recreated with TIDELOG_FIU_CONTROL
    (docker/entrypoint.py runs the broker under fiu-run), the failure points enabled with
    fiu-ctrl through ``docker exec``, and the container recreated without it at the end, also
    when the fault is interrupted."""
    led = _led_by(cluster, topic, broker_id)
    cluster.set_fault_environment(broker_id, {"TIDELOG_FIU_CONTROL": FIU_CONTAINER_PREFIX})
    halted = False
    try:
        # a clean stop, then the broker under the preload, whose start a loaded machine slows
        cluster.recreate_broker(broker_id, timeout=RECREATE_TIMEOUT_S)
        wait_for_full_isr(cluster, topic)
        if led:
            _lead_again(cluster, topic, broker_id, led)
        through = tuple(cluster.exec_command(broker_id, []))

        def alive() -> bool:
            return cluster.broker(broker_id).alive

        for operation in settings.operations:
            _fiu_control(
                Path(FIU_CONTAINER_PREFIX),
                1,
                f"enable_random name={DISK_ERROR_POINTS[operation]},"
                f"probability={settings.probability},failinfo={EIO}",
                alive,
                through,
            )
        deadline = time.monotonic() + hold_s
        while alive() and time.monotonic() < deadline:
            time.sleep(0.3)
        halted = HALTED in cluster.broker_log(broker_id)
        for operation in settings.operations:
            disable = f"disable name={DISK_ERROR_POINTS[operation]}"
            _fiu_control(Path(FIU_CONTAINER_PREFIX), 1, disable, alive, through)
    finally:
        cluster.set_fault_environment(broker_id, {})
        # stopped cleanly if it did not halt; not made again in a project taken down meanwhile
        # (an interrupted scenario's teardown)
        if cluster.has_container(broker_id):
            cluster.recreate_broker(broker_id, timeout=RECREATE_TIMEOUT_S)
    operations = "/".join(settings.operations)
    outcome = "halted on an I/O error" if halted else f"ran {hold_s:.0f} s without halting"
    return (
        f"broker {broker_id}'s {operations} calls failed with EIO at p={settings.probability}: "
        f"it {outcome}; its container recreated without the errors"
    )


def _led_by(cluster: Cluster, topic: str, broker_id: int) -> list[int]:
    """The partitions of ``topic`` that ``broker_id`` leads and is the preferred replica of."""
    metadata = _zookeeper_read(cluster, lambda zk: zookeeper.read_topic(zk, topic))
    return sorted(
        number
        for number, state in metadata.states.items()
        if state.leader == broker_id and metadata.assignment[number][0] == broker_id
    )


def _lead_again(cluster: Cluster, topic: str, broker_id: int, partitions: list[int]) -> None:
    """A preferred leader election of ``partitions`` (as after a rolling restart), so that the
    restarted broker serves reads again as the leader it was; waits until it leads them."""

    def leads(zk) -> bool:
        metadata = zookeeper.read_topic(zk, topic)
        if metadata is None:
            raise ClusterError(f"{topic} was deleted while broker {broker_id} restarted")
        elsewhere = [p for p in partitions if metadata.states[p].leader != broker_id]
        if elsewhere:
            with contextlib.suppress(RuntimeError):  # one pending: the controller takes it
                zookeeper.request_preferred_leader_election(zk, [(topic, p) for p in elsewhere])
        return not elsewhere

    wait_until(
        lambda: _zookeeper_read(cluster, leads),
        60,
        f"broker {broker_id} to lead {topic} partitions {partitions} again",
        interval=0.5,
    )


def kill_and_wipe(cluster: Cluster, broker_id: int, *, session_timeout_s: float) -> list[str]:
    """The first half of wipe_and_rebuild: kills the broker, waits until the cluster has seen it
    die (no registration, no leadership: were it to come back empty while still leader, it
    would lead with an empty log), and deletes its log dirs. Returns the dirs deleted."""
    if not isinstance(cluster, LocalCluster):
        raise ClusterError("wipe_and_rebuild needs a local cluster (its log dirs on this disk)")
    cluster.signal_broker(broker_id, signal.SIGKILL)
    wait_until(
        lambda: not _zookeeper_read(cluster, lambda zk: _holds_anything(zk, broker_id)),
        session_timeout_s * 3 + 10,
        f"the cluster to see broker {broker_id} gone (no registration, no leadership)",
        interval=0.2,
    )
    log_dirs = read_properties(cluster.broker(broker_id).config)["log.dirs"].split(",")
    for directory in log_dirs:
        shutil.rmtree(directory, ignore_errors=True)
    return log_dirs


@dataclass(frozen=True)
class TruncationRoles:
    """The brokers of one partition in ``truncation_failover``."""

    partition: int
    leader: int
    paused: int  # the follower next in line, never the controller
    third: int


def truncation_failover(
    cluster: Cluster, topic: str, roles: TruncationRoles, *, session_timeout_s: float
) -> str:
    """KIP-101's first scenario, made to happen: a follower truncates, then leads.

    Right after an acknowledgement (the producer holds; ``roles`` were read before, as the
    followers learn the high watermark of that acknowledgement within replica.fetch.wait.max.ms),
    the partition's next-in-line follower is paused and its leader stopped cleanly. The
    controller hands the partition to the paused follower, so the third replica becomes its
    follower and truncates: with replica.truncation.mode=high-watermark to its own high
    watermark, which has not yet caught up with the last acknowledgement; by leader epoch it
    cannot truncate, as the paused leader does not answer. When the paused follower's session
    expires the third replica leads, with or without the acknowledged messages. Both
    brokers then come back.
    """
    partition, leader, paused, third = roles.partition, roles.leader, roles.paused, roles.third
    cluster.signal_broker(paused, signal.SIGSTOP)
    try:
        cluster.stop_broker(leader)
        wait_until_leader(cluster, topic, lambda current: current == paused, partition=partition)
        wait_until_leader(
            cluster,
            topic,
            lambda current: current == third,
            partition=partition,
            timeout=session_timeout_s * 3 + 10,
        )
    finally:
        cluster.signal_broker(paused, signal.SIGCONT)
        if not cluster.broker(leader).alive:
            cluster.start_broker(leader)
    return (
        f"{topic}-{partition}: stopped leader {leader} while follower {paused} was paused; "
        f"broker {third} followed {paused}, then led once its session expired"
    )


def truncation_roles(cluster: Cluster, topic: str) -> TruncationRoles:
    """A partition whose next in line is not the controller (so that a controller is there to
    elect it), with its three in-sync replicas."""

    def roles(zk):
        controller = zookeeper.read_controller(zk)
        metadata = zookeeper.read_topic(zk, topic)
        if metadata is None:
            raise ClusterError(f"truncation_failover: no topic {topic}")
        for number, replicas in sorted(metadata.assignment.items()):
            state = metadata.states[number]
            in_line = [r for r in replicas if r != state.leader and r in state.isr]
            if len(in_line) == 2 and in_line[0] != controller:
                return TruncationRoles(number, state.leader, in_line[0], in_line[1])
        raise ClusterError(
            f"truncation_failover needs a partition of {topic} with three in-sync replicas "
            f"whose next in line is not the controller (broker {controller})"
        )

    return _zookeeper_read(cluster, roles)


def topic_view(admin_port: int, topic: str, host: str = "127.0.0.1") -> dict | None:
    """A broker's own view of ``topic`` (its admin API's GET /topics/{topic}); None when the
    broker does not answer or does not know the topic (404)."""
    try:
        url = f"http://{host}:{admin_port}/topics/{topic}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            return json.loads(reply.read())
    except (OSError, ValueError):
        return None


def _broker_topic_view(cluster: Cluster, broker_id: int, topic: str) -> dict | None:
    broker = cluster.broker(broker_id)
    return topic_view(broker.admin_port, topic, broker.admin_host)


def wait_for_offload(cluster: LocalCluster, topic: str, timeout: float = 120) -> None:
    """Waits until the leader of every partition of ``topic`` has moved its older data to the
    remote tier and deleted it locally (local log start above the log start): a broker rebuilt
    after that has a remote part to skip."""

    def offloaded() -> bool:
        led: dict[int, dict] = {}
        for broker_id in cluster.broker_ids:
            described = _broker_topic_view(cluster, broker_id, topic)
            if described is None:
                continue  # not up, or does not know the topic yet
            for entry in described["partitions"]:
                if entry["leader"] == broker_id and "local_log_start_offset" in entry:
                    led[entry["partition"]] = entry
        partitions = _zookeeper_read(cluster, lambda zk: zookeeper.read_topic(zk, topic))
        return set(led) == set(partitions.assignment) and all(
            entry["local_log_start_offset"] > entry["log_start_offset"] for entry in led.values()
        )

    wait_until(offloaded, timeout, f"every partition of {topic} to have data only in the tier")


def has_full_isr(zk, topic: str) -> bool:
    """Whether every partition of ``topic`` has a live leader and every replica in its ISR."""
    live = set(zookeeper.read_brokers(zk))
    metadata = zookeeper.read_topic(zk, topic)
    if metadata is None:
        return False
    return all(
        number in metadata.states
        and metadata.states[number].leader in live
        and set(metadata.states[number].isr) == set(replicas)
        for number, replicas in metadata.assignment.items()
    )


def wait_for_full_isr(cluster: Cluster, topic: str, timeout: float = 90) -> None:
    """Waits until every partition of ``topic`` has a live leader and every replica in its ISR,
    and every live broker has the logs of its replicas open. The ISR alone is not enough: a new
    topic's ISR is full in ZooKeeper before any broker has opened its logs, and a broker
    restarted before its session expired is still in every ISR while it loads its logs."""
    live: set[int] = set()

    def recovered(zk) -> bool:
        live.clear()
        live.update(zookeeper.read_brokers(zk))
        return has_full_isr(zk, topic)

    wait_until(
        lambda: (
            _zookeeper_read(cluster, recovered) and every_replica_has_its_log(cluster, topic, live)
        ),
        timeout,
        f"every partition of {topic} to have a leader and a full ISR, every replica its log",
        interval=0.5,
    )


def every_replica_has_its_log(cluster: Cluster, topic: str, brokers: set[int]) -> bool:
    """Each of ``brokers`` has opened the log of every partition of ``topic`` assigned to it
    (its admin API says so; a broker serves clients once its logs are open)."""
    for broker_id in brokers:
        described = _broker_topic_view(cluster, broker_id, topic)
        if described is None:  # not up yet, or not serving this topic yet (404)
            return False
        if any(
            broker_id in p["replicas"] and "log_end_offset" not in p
            for p in described["partitions"]
        ):
            return False
    return True


def _state(cluster: Cluster, topic: str, partition: int):
    return _zookeeper_read(cluster, lambda zk: zookeeper.read_topic(zk, topic)).states[partition]


def wait_until_isr_size(
    cluster: Cluster, topic: str, size: int, timeout: float = 60, partition: int = 0
) -> None:
    """Waits until a partition of ``topic`` has ``size`` replicas in its ISR."""
    wait_until(
        lambda: len(_state(cluster, topic, partition).isr) == size,
        timeout,
        f"the ISR of {topic}-{partition} to have {size} replicas",
        interval=0.3,
    )


def wait_until_leader(
    cluster: Cluster, topic: str, wanted, timeout: float = 60, partition: int = 0
) -> None:
    """Waits until the leader of a partition of ``topic`` satisfies ``wanted(leader)``."""
    wait_until(
        lambda: wanted(_state(cluster, topic, partition).leader),
        timeout,
        f"the leader of {topic}-{partition} to change",
        interval=0.1,
    )
