"""``tidelog scenario``: a cluster broken on purpose (replication faults) or upgraded (the
message-format phases) under load, and every message checked afterwards."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from tidelog.cli.common import fail, key_values
from tidelog.reach import Unreachable

if TYPE_CHECKING:
    from tidelog.cluster.compose import ComposeCluster
    from tidelog.cluster.swarm import SwarmCluster


def add(commands) -> None:
    scenario = commands.add_parser(
        "scenario",
        help="chaos scenarios with a delivery check",
        description="Break a cluster on purpose while producing, then check every message.",
    )
    kinds = scenario.add_subparsers(dest="kind", required=True, metavar="KIND")
    _add_replication(kinds)
    _add_upgrade(kinds)


def _add_replication(kinds) -> None:
    from tidelog.cluster.faults import FAILURES, TARGETS

    replication = kinds.add_parser(
        "replication",
        help="faults on the leader, a follower or the controller while producing",
        description=(
            "Produces at a steady rate to a topic with replication factor 3 and "
            "min.insync.replicas 2, injects the failure CYCLES times (waiting for recovery each "
            "time), then consumes everything and checks: acknowledged but lost, duplicates, "
            "order, divergence between replicas, time indexes, LogAppendTime order. Exits 1 on "
            "any violation."
        ),
    )
    replication.add_argument(
        "--brokers", type=int, default=3, help="brokers of a cluster this command starts"
    )
    replication.add_argument(
        "--failure",
        required=True,
        choices=FAILURES,
        help=(
            "truncation_failover stops a leader while its next-in-line follower is paused, so "
            "that the third replica truncates and then leads (KIP-101); it picks its own "
            "brokers, so --target must be leader; wipe_and_rebuild kills a broker, deletes its "
            "log dirs and starts it again, on a cluster with tiered storage"
        ),
    )
    replication.add_argument(
        "--target",
        default="leader",
        choices=TARGETS,
        help=(
            "the broker hit: partition 0's leader, one of its followers, or the controller; "
            "replicas (power_loss only): every replica of partition 0 at once"
        ),
    )
    replication.add_argument(
        "--topic-config",
        action="append",
        metavar="KEY=VALUE",
        help="a setting of the scenario's topic (flush.messages=1: fsync every message)",
    )
    replication.add_argument(
        "--disk-error-ops",
        default="write,fsync",
        metavar="OPS",
        help="disk_errors: which of the target's disk operations fail, of write, read, fsync "
        "(default write,fsync)",
    )
    replication.add_argument(
        "--disk-error-probability",
        type=float,
        default=0.02,
        metavar="P",
        help="disk_errors: the probability each such call fails with EIO (default 0.02)",
    )
    replication.add_argument(
        "--seed", type=int, help="power_loss: the seed of where each file is cut (default: random)"
    )
    replication.add_argument(
        "--truncation-mode",
        default="leader-epoch",
        choices=["leader-epoch", "high-watermark"],
        help=(
            "replica.truncation.mode of a cluster this command starts: high-watermark "
            "truncates as Kafka 0.10 did, and can lose acknowledged messages"
        ),
    )
    replication.add_argument(
        "--format",
        default="0.10.0",
        choices=["0.9.0", "0.10.0", "2.1"],
        help="the topic's message.format.version (0.9.0: v0 messages, 0.10.0: v1, 2.1: v2 "
        "record batches, on brokers of release 2.1 produced to with Produce v3)",
    )
    replication.add_argument("--acks", default="all", choices=["1", "all"])
    replication.add_argument(
        "--cycles", type=int, default=1, help="how many times the failure is injected"
    )
    replication.add_argument("--rate", type=float, default=200, help="messages per second")
    replication.add_argument("--dir", help="use (or start) the cluster in this directory")
    replication.add_argument(
        "--compose",
        action="store_true",
        help=(
            "run on a compose cluster of its own (three brokers from --compose-file, removed "
            "afterwards), faults injected through the engine: docker kill -s KILL, docker "
            "pause, docker stop/start, network_partition and partition (docker network "
            "disconnect); partition_zookeeper, partition_one_way, partition_halves and degraded "
            "by rules in the containers' network namespaces (needs root); disk_errors by libfiu "
            "in the target's recreated container; disk_full by a small ext4 image mounted over "
            "its log dir in its container (needs root)"
        ),
    )
    replication.add_argument(
        "--compose-file", default="compose.yaml", help="with --compose (default: ./compose.yaml)"
    )
    replication.add_argument(
        "--swarm",
        metavar="STACK",
        help=(
            "run on the Swarm stack STACK as deployed (`tidelog cluster stack`), from the node "
            "that runs the target's task: kill its container (the service then scaled to 0 "
            "until started again), pause it, scale the service to 0 and back (clean_shutdown, "
            "clean_bounce), network_partition and partition (docker network disconnect)"
        ),
    )
    replication.add_argument(
        "--idempotent",
        action="store_true",
        help=(
            "an idempotent producer (needs --format 2.1): a producer id from InitProducerId, "
            "each message sent again until acknowledged with its sequence; the verdict then "
            "holds the brokers to no duplicates and each partition's order"
        ),
    )
    replication.add_argument(
        "--compacted",
        action="store_true",
        help=(
            "a compacted topic whose cleaner runs during the faults, keyed messages, and the "
            "per-key audit: every key ends on its last acknowledged value (or a later one), in "
            "publication order, and no value read was never produced"
        ),
    )
    replication.add_argument(
        "--netns",
        action="store_true",
        help=(
            "start the cluster with each broker and ZooKeeper in a network namespace of its own "
            "(needs root), where partition, partition_zookeeper, partition_one_way, "
            "partition_halves and degraded cut or slow its links"
        ),
    )
    replication.add_argument(
        "--link-rate",
        default="1mbit",
        metavar="RATE",
        help="degraded: the target's link rate each way, in tc's units (default 1mbit)",
    )
    replication.add_argument(
        "--link-loss",
        type=float,
        default=0.05,
        metavar="P",
        help="degraded: the probability each packet to or from the target is dropped (0.05)",
    )
    replication.add_argument("--report", metavar="FILE", help="write the report as JSON")
    replication.add_argument(
        "--out",
        metavar="RUN_DIR",
        help="write a run directory: acknowledgements, faults, what was consumed, the verdict",
    )
    replication.set_defaults(run=run_replication)


def run_replication(args: argparse.Namespace) -> int:
    from tidelog import gc_policy, runtime
    from tidelog.cluster import faults
    from tidelog.cluster.faults import DISK_ERROR_POINTS, DiskErrorSettings
    from tidelog.cluster.local import ClusterError, LocalCluster
    from tidelog.cluster.netns import NetworkError
    from tidelog.cluster.scenario import (
        COMPACTED_BROKER_OVERRIDES,
        FAILURE_BROKER_OVERRIDES,
        RELEASE_2_1,
        SCENARIO_OVERRIDES,
        ScenarioSettings,
        run_scenario,
    )
    from tidelog.cluster.swarm import SwarmCluster
    from tidelog.cluster.zookeeper import ZooKeeperError
    from tidelog.config import ConfigError

    # SIGTERM unwinds as SIGINT does: the faults in place are undone, a cluster started here
    # is stopped and its namespaces removed
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.failure == "truncation_failover" and args.target != "leader":
        return fail("scenario replication", "truncation_failover: --target must be leader")
    if args.target == "replicas" and args.failure != "power_loss":
        return fail("scenario replication", "--target replicas: only with --failure power_loss")
    try:
        topic_config = key_values(args.topic_config, "--topic-config")
    except ConfigError as error:
        return fail("scenario replication", error)
    disk_error_ops = tuple(op.strip() for op in args.disk_error_ops.split(",") if op.strip())
    if not disk_error_ops or any(op not in DISK_ERROR_POINTS for op in disk_error_ops):
        return fail(
            "scenario replication",
            f"--disk-error-ops {args.disk_error_ops!r}: allowed: {', '.join(DISK_ERROR_POINTS)}",
        )
    if not 0 < args.disk_error_probability <= 1:
        return fail(
            "scenario replication",
            f"--disk-error-probability {args.disk_error_probability}: allowed: 0 < P <= 1",
        )
    settings = ScenarioSettings(
        failure=args.failure,
        target=args.target,
        message_format=args.format,
        acks=-1 if args.acks == "all" else int(args.acks),
        cycles=args.cycles,
        rate=args.rate,
        link_rate=args.link_rate,
        link_loss=args.link_loss,
        topic_config=topic_config,
        seed=args.seed,
        disk_errors=DiskErrorSettings(disk_error_ops, args.disk_error_probability),
        compacted=args.compacted,
        idempotent=args.idempotent,
    )
    if args.idempotent and args.format != "2.1":
        return fail(
            "scenario replication",
            f"--idempotent needs record batches: --format {args.format}; allowed: --format 2.1",
        )
    if not 0 <= args.link_loss < 1:
        return fail("scenario replication", f"--link-loss {args.link_loss}: allowed: 0 <= P < 1")
    if sum(map(bool, (args.netns, args.compose, args.swarm))) > 1:
        return fail("scenario replication", "--netns, --compose and --swarm: choose one")
    if args.swarm and args.failure in faults.NOT_ON_A_STACK:
        return fail("scenario replication", str(faults.not_on_a_stack(args.failure)))
    directory = args.dir or tempfile.mkdtemp(prefix="tidelog-scenario-")
    overrides = {
        **SCENARIO_OVERRIDES,
        **FAILURE_BROKER_OVERRIDES.get(args.failure, {}),
        **(COMPACTED_BROKER_OVERRIDES if args.compacted else {}),
        **(RELEASE_2_1 if args.format == "2.1" else {}),
        "replica.truncation.mode": args.truncation_mode,
    }
    try:
        if args.swarm:
            stack = SwarmCluster(args.swarm, directory)
            stack.link_log_dirs()  # the delivery check compares the replicas on this node
            # from a whole cluster: a task Swarm is replacing would take the topic's replicas
            stack.wait_healthy(timeout=120)
            stack.wait_registered(stack.broker_ids, 120)
            cluster: LocalCluster | ComposeCluster | SwarmCluster = stack
        elif args.compose:
            cluster = _compose_cluster(args, directory)
        else:
            cluster = LocalCluster(directory)
        started_here = not cluster.running
    except ClusterError as error:
        return fail("scenario replication", f"{error}\n(the cluster's files are in {directory})")
    except Unreachable:
        if args.dir is None:  # nothing was started in the directory made for it
            shutil.rmtree(directory, ignore_errors=True)
        raise
    try:
        if started_here:
            print(f"starting {args.brokers} brokers in {directory}")
            if isinstance(cluster, LocalCluster):
                cluster.up(
                    args.brokers, overrides=overrides, progress=lambda _: None, netns=args.netns
                )
            elif isinstance(cluster, SwarmCluster):  # deployed by its user, left as it was
                raise ClusterError(f"stack {args.swarm} runs no service: deploy it first")
            else:
                cluster.up(args.brokers, overrides=overrides, progress=lambda _: None)
        run_dir = Path(args.out) if args.out else None
        gc_policy.for_measuring()
        topic, report = runtime.run(run_scenario(cluster, settings, run_dir=run_dir))
    except (ClusterError, ZooKeeperError, NetworkError, ConfigError) as error:
        return fail("scenario replication", f"{error}\n(the cluster's files are in {directory})")
    finally:
        if (
            started_here
            and not isinstance(cluster, SwarmCluster)
            and (
                cluster.state is not None or (isinstance(cluster, LocalCluster) and cluster.network)
            )
        ):
            cluster.down(progress=lambda _: None)
    print()
    print(
        f"scenario: {args.failure} of the {args.target}, format {args.format}, acks={args.acks}, "
        f"{args.cycles} cycle(s), topic {topic}"
    )
    print(report.table())
    if args.out:
        print(f"run data written to {args.out}")
    if args.report:
        document = {"settings": asdict(settings), "topic": topic, "report": report.as_dict()}
        with open(args.report, "w") as file:
            json.dump(document, file, indent=2)
        print(f"report written to {args.report}")
    print("verdict: " + ("PASS" if report.ok else "FAIL"))
    if args.dir is None:  # a cluster of its own, in a temporary directory
        if report.ok:
            shutil.rmtree(directory, ignore_errors=True)
        else:
            print(f"the cluster's logs and data are kept in {directory}")
    return 0 if report.ok else 1


def _compose_cluster(args: argparse.Namespace, directory: str) -> ComposeCluster:
    """--compose: a compose project of its own (free 127.0.0.1 ports), faults through the engine."""
    from tidelog.cluster.compose import ComposeCluster

    return ComposeCluster.create(
        directory, args.compose_file, project=f"tidelog-scenario-{os.getpid()}"
    )


def _add_upgrade(kinds) -> None:
    from tidelog.upgrade.scenario import CODECS, STARTS

    scenario = kinds.add_parser(
        "upgrade",
        help="an upgrade run under load from clients of every era, every message checked",
        description=(
            "Starts a cluster at --from, produces acks=all from a v0-era (Produce v1) and a "
            "v1-era (Produce v2) producer per codec, and a v2-era one (Produce v3, record "
            "batches) with --to 2.1, consumes with a consumer of each era (Fetch v1, v2, v4), "
            "runs `tidelog upgrade run --to` through every phase, then checks every "
            "acknowledged message, the formats the consumers got, and /metrics."
        ),
    )
    scenario.add_argument("--from", dest="start", default="0.9.0", choices=list(STARTS))
    targets = sorted({t for _, ts in STARTS.values() for t in ts})
    scenario.add_argument(
        "--to",
        choices=targets,
        help="the target release (default: 0.10.0 from 0.9.0, 0.10.1 from 0.10.0)",
    )
    scenario.add_argument(
        "--codecs", default="none,snappy,lz4", help=f"comma-separated, of {', '.join(CODECS)}"
    )
    scenario.add_argument("--rate", type=float, default=20, help="messages/s per producer")
    scenario.add_argument("--dir", help="the cluster's directory (default: a new temporary one)")
    scenario.add_argument("--report", metavar="FILE", help="write the report as JSON")
    scenario.set_defaults(run=run_upgrade)


def run_upgrade(args: argparse.Namespace) -> int:
    from tidelog import gc_policy, runtime
    from tidelog.cluster.local import ClusterError, LocalCluster
    from tidelog.cluster.scenario import SCENARIO_OVERRIDES
    from tidelog.upgrade.scenario import (
        CODECS,
        STARTS,
        UpgradeScenario,
        run_upgrade_scenario,
        summary,
    )

    codecs = tuple(c.strip() for c in args.codecs.split(",") if c.strip())
    unknown = [c for c in codecs if c not in CODECS]
    if unknown or not codecs:
        return fail("scenario upgrade", f"--codecs {args.codecs!r}: allowed: {', '.join(CODECS)}")
    try:
        scenario = UpgradeScenario(args.start, codecs, args.rate, to=args.to)
    except ValueError as error:
        return fail("scenario upgrade", str(error))
    directory = args.dir or tempfile.mkdtemp(prefix="tidelog-upgrade-")
    cluster = LocalCluster(directory)
    try:
        print(f"starting 3 brokers at {args.start} in {directory}, upgrading to {scenario.target}")
        cluster.up(
            3, overrides={**SCENARIO_OVERRIDES, **STARTS[args.start][0]}, progress=lambda _: None
        )
        gc_policy.for_measuring()
        report = runtime.run(run_upgrade_scenario(cluster, scenario))
    except ClusterError as error:
        return fail("scenario upgrade", f"{error}\n(the cluster's files are in {directory})")
    finally:
        if cluster.state is not None:
            cluster.down(progress=lambda _: None)
    print(summary(report))
    if args.report:
        with open(args.report, "w") as file:
            json.dump(report, file, indent=2)
    if not report["ok"]:
        print(f"the cluster's files are kept in {directory}")
        return 1
    if not args.dir:  # a passing run leaves nothing behind, as `scenario replication` does
        shutil.rmtree(directory, ignore_errors=True)
    return 0
