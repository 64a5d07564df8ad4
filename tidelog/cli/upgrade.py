"""``tidelog upgrade``: a cluster walked through the message-format upgrade (plan, run), one
broker tried on the new format and taken back (canary, rollback), and a compose cluster moved to
another image (roll)."""

from __future__ import annotations

import argparse
import json
import sys


def add(commands) -> None:
    from tidelog.upgrade.plan import TARGETS

    upgrade = commands.add_parser(
        "upgrade",
        help="walk a local cluster through the message-format upgrade, one broker at a time",
        description=(
            "The phases of KIP-32 (to 0.10, format v1) and of Kafka 0.11's upgrade notes (to "
            "2.1, format v2) as one command: plan, run (resumable, with a journal); canary and "
            "rollback of one broker on the next format (v1 on a v0 cluster, v2 on a v1 one)."
        ),
    )
    actions = upgrade.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in [
        ("plan", "print the steps from the cluster as it is to --to"),
        ("run", "perform the steps (or resume an unfinished run); stops at the first failed check"),
    ]:
        action = actions.add_parser(name, help=text, description=text[0].upper() + text[1:])
        _add_cluster_options(action, "the cluster's state directory")
        action.add_argument("--to", required=True, choices=TARGETS, help="the target release")
        if name == "run":
            _add_acting_options(action, "after the last step before checking its format")
        action.set_defaults(run=run_upgrade)
    for name, text in [
        (
            "canary",
            "after phase 1, put one broker on the next log.message.format.version (0.10.0, "
            "format v1, on a 0.9.0 cluster; 2.1, format v2, on a 0.10.0 one), its preferred "
            "leadership moved away first but for --leaders partitions",
        ),
        (
            "rollback",
            "take a canary back: stop it, delete its copies of the partitions it led, set "
            "the cluster's format (0.9.0 or 0.10.0) again, restart it and let it re-replicate; "
            "what it wrote in the new format stays on every replica (v2 batches are "
            "down-converted for fetchers older than Fetch v4)",
        ),
    ]:
        action = actions.add_parser(name, help=text, description=text[0].upper() + text[1:])
        action.add_argument("broker_id", type=int, metavar="BROKER_ID")
        action.add_argument("--dir", required=True, help="the cluster's state directory")
        _add_acting_options(action, "before checking the format of new messages")
        if name == "canary":
            action.add_argument(
                "--leaders",
                type=int,
                default=1,
                help="partitions the canary stays preferred leader of (default 1)",
            )
        action.set_defaults(run=run_canary)
    text = "recreate a compose cluster's or a stack's brokers from another image tag, one at a time"
    roll = actions.add_parser("roll", help=text, description=text[0].upper() + text[1:] + ".")
    _add_cluster_options(roll, "the compose cluster's directory (it holds compose.env)")
    roll.add_argument("--image-tag", required=True, help="the brokers' new image: tidelog:TAG")
    roll.add_argument("--timeout", type=float, default=120.0, help="seconds each check may take")
    roll.set_defaults(run=run_roll)


def _add_cluster_options(action: argparse.ArgumentParser, directory: str) -> None:
    """--dir, or --swarm STACK (its state directory: --dir if given)."""
    action.add_argument("--dir", help=directory)
    action.add_argument(
        "--swarm",
        metavar="STACK",
        help="a Swarm stack's brokers, each restart a `docker service update` from this manager",
    )


def _open(args: argparse.Namespace):
    """The cluster of --swarm or --dir; ClusterError if neither is given."""
    from tidelog.cluster.local import ClusterError
    from tidelog.cluster.rolling import open_cluster
    from tidelog.cluster.swarm import SwarmCluster

    if args.swarm:
        cluster = SwarmCluster(args.swarm, args.dir)
        cluster.link_log_dirs()  # the plan reads the segments of the brokers on this node
        return cluster
    if args.dir is None:
        raise ClusterError("--dir DIR or --swarm STACK: one is needed")
    return open_cluster(args.dir)


def _add_acting_options(action: argparse.ArgumentParser, settle_before: str) -> None:
    """--dry-run, --timeout and --settle-seconds of the actions that change a cluster."""
    action.add_argument("--dry-run", action="store_true", help="print, do nothing")
    action.add_argument("--timeout", type=float, default=120.0, help="seconds each check may take")
    action.add_argument(
        "--settle-seconds", type=float, default=0.0, help=f"wait this long {settle_before}"
    )


def run_upgrade(args: argparse.Namespace) -> int:
    """``upgrade plan`` and ``upgrade run`` (``run --dry-run`` prints the plan)."""
    from tidelog.cluster.local import ClusterError
    from tidelog.config import ConfigError
    from tidelog.upgrade.canary import CANARY_JOURNAL, CanaryJournal
    from tidelog.upgrade.run import UpgradeFailed, UpgradeRun

    try:
        cluster = _open(args)
    except ClusterError as error:
        print(f"tidelog upgrade {args.action}: {error}", file=sys.stderr)
        return 2
    canary = CanaryJournal.load(cluster.directory / CANARY_JOURNAL)
    if args.action == "run" and canary is not None and canary.unfinished:
        print(
            f"tidelog upgrade run: an unfinished {canary.kind} of broker {canary.broker_id} "
            f"({canary.path}): `tidelog upgrade {canary.kind} {canary.broker_id} --dir "
            f"{cluster.directory}` finishes it first",
            file=sys.stderr,
        )
        return 2
    try:
        runner = UpgradeRun(
            cluster,
            args.to,
            timeout=getattr(args, "timeout", 120.0),
            settle_seconds=getattr(args, "settle_seconds", 0.0),
        )
        if args.action == "plan" or args.dry_run:
            steps, resuming = runner.steps()
            pending = [step for step in steps if step.status != "done"]
            if resuming:
                print(f"an unfinished run to {args.to} ({runner.path}) resumes with:")
            for number, step in enumerate(pending, start=1):
                print(f"{number}. {step.describe()}")
            done = f"nothing to do: the cluster runs {args.to}"
            print(f"{len(pending)} steps" if pending else done)
            return 0
        journal = runner.run()
        seconds = {name: phase.get("seconds") for name, phase in journal.phases.items()}
        print(json.dumps({"journal": str(runner.path), "phase_seconds": seconds}))
        return 0
    except UpgradeFailed as error:
        print(f"tidelog upgrade run: {error}", file=sys.stderr)
        return 1
    except (ClusterError, ConfigError, ValueError) as error:
        print(f"tidelog upgrade {args.action}: {error}", file=sys.stderr)
        return 2


def run_canary(args: argparse.Namespace) -> int:
    """``upgrade canary`` and ``upgrade rollback``."""
    from tidelog.cluster.local import ClusterError, LocalCluster
    from tidelog.config import ConfigError
    from tidelog.upgrade.canary import CanaryRefused, CanaryRun
    from tidelog.upgrade.run import UpgradeFailed

    where = f"tidelog upgrade {args.action} {args.broker_id}"
    if getattr(args, "leaders", 0) < 0:
        print(f"{where}: --leaders {args.leaders}: allowed: 0 or more", file=sys.stderr)
        return 2
    cluster = LocalCluster(args.dir)
    try:
        runner = CanaryRun(
            cluster,
            args.action,
            args.broker_id,
            leaders=getattr(args, "leaders", 1),
            timeout=args.timeout,
            settle_seconds=args.settle_seconds,
        )
        if args.dry_run:
            reason = runner.refusal()
            if reason is not None:
                print(f"{where}: refused: {reason}", file=sys.stderr)
                return 2
            if runner.resumable() is not None:
                print(f"an unfinished {args.action} of broker {args.broker_id} resumes with:")
            for number, line in enumerate(runner.describe(), start=1):
                print(f"{number}. {line}")
            return 0
        journal = runner.run()
        print(json.dumps({"journal": str(runner.path), "data": journal.data.get("checked")}))
        return 0
    except CanaryRefused as error:
        print(f"{where}: refused: {error}", file=sys.stderr)
        return 2
    except UpgradeFailed as error:
        print(f"{where}: {error}", file=sys.stderr)
        return 1
    except (ClusterError, ConfigError, ValueError) as error:
        print(f"{where}: {error}", file=sys.stderr)
        return 2


def run_roll(args: argparse.Namespace) -> int:
    from tidelog.cluster.compose import ComposeCluster
    from tidelog.cluster.local import ClusterError
    from tidelog.cluster.swarm import SwarmCluster
    from tidelog.upgrade.roll import roll_image

    try:
        cluster = _open(args)
        if not isinstance(cluster, ComposeCluster | SwarmCluster):
            raise ClusterError(f"{args.dir} holds no compose cluster (compose.env) or stack")
        image = cluster.image_for_tag(args.image_tag)
        rows = roll_image(cluster, args.image_tag, timeout=args.timeout)
    except (ClusterError, TimeoutError) as error:
        print(f"tidelog upgrade roll: {error}", file=sys.stderr)
        return 1
    print(json.dumps({"image": image, "brokers": rows}))
    return 0
