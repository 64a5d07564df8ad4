"""`tidelog upgrade plan|run|canary|rollback`: the upgrade package's command line (for cli.py)."""

from __future__ import annotations

import argparse
import json
import sys

from tidelog.upgrade.plan import TARGETS


def add_commands(commands) -> None:
    """Adds `upgrade` with its actions to tidelog's subcommands."""
    upgrade = commands.add_parser(
        "upgrade",
        help="walk a local cluster through the message-format upgrade, one broker at a time",
        description=(
            "The KIP-32 phases as one command: plan, run (resumable, with a journal); "
            "canary and rollback of one broker on format v1."
        ),
    )
    actions = upgrade.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in [
        ("plan", "print the steps from the cluster as it is to --to"),
        ("run", "perform the steps (or resume an unfinished run); stops at the first failed check"),
    ]:
        action = actions.add_parser(name, help=text, description=text[0].upper() + text[1:])
        action.add_argument("--dir", required=True, help="the cluster's state directory")
        action.add_argument("--to", required=True, choices=TARGETS, help="the target release")
        if name == "run":
            add_acting_options(action, "after the last step before checking its format")
    add_canary_commands(actions)
    upgrade.set_defaults(run=run_command)
    from tidelog.upgrade.roll import add_roll  # a compose cluster to another image

    add_roll(actions)


def add_acting_options(action: argparse.ArgumentParser, settle_before: str) -> None:
    """--dry-run, --timeout and --settle-seconds of the commands that change a cluster."""
    action.add_argument("--dry-run", action="store_true", help="print, do nothing")
    action.add_argument("--timeout", type=float, default=120.0, help="seconds each check may take")
    action.add_argument(
        "--settle-seconds", type=float, default=0.0, help=f"wait this long {settle_before}"
    )


def add_canary_commands(actions) -> None:
    """`upgrade canary BROKER_ID` and `upgrade rollback BROKER_ID`."""
    for name, text in [
        (
            "canary",
            "after phase 1, put one broker on log.message.format.version=0.10.0 (format v1), "
            "its preferred leadership moved away first but for --leaders partitions",
        ),
        (
            "rollback",
            "take a canary back: stop it, delete its copies of the partitions it led, set "
            "0.9.0, restart it and let it re-replicate",
        ),
    ]:
        action = actions.add_parser(name, help=text, description=text[0].upper() + text[1:])
        action.add_argument("broker_id", type=int, metavar="BROKER_ID")
        action.add_argument("--dir", required=True, help="the cluster's state directory")
        add_acting_options(action, "before checking the format of new messages")
        if name == "canary":
            action.add_argument(
                "--leaders",
                type=int,
                default=1,
                help="partitions the canary stays preferred leader of (default 1)",
            )


def canary_command(args: argparse.Namespace) -> int:
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


def run_command(args: argparse.Namespace) -> int:
    if args.action in ("canary", "rollback"):
        return canary_command(args)
    from tidelog.cluster.local import ClusterError
    from tidelog.cluster.rolling import open_cluster
    from tidelog.config import ConfigError
    from tidelog.upgrade.canary import CANARY_JOURNAL, CanaryJournal
    from tidelog.upgrade.run import UpgradeFailed, UpgradeRun

    cluster = open_cluster(args.dir)
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


def add_scenario(kinds) -> None:
    """Adds `scenario upgrade` to the scenario kinds."""
    from tidelog.upgrade.scenario import CODECS, STARTS

    scenario = kinds.add_parser(
        "upgrade",
        help="an upgrade run under load from 0.9- and 0.10-era clients, every message checked",
        description=(
            "Starts a cluster at --from, produces acks=all from a v0-era (Produce v1) and a "
            "v1-era (Produce v2) producer per codec, consumes with v0- and v1-era consumers, "
            "runs `tidelog upgrade run` through every phase, then checks every acknowledged "
            "message, the formats the consumers got, and /metrics."
        ),
    )
    scenario.add_argument("--from", dest="start", default="0.9.0", choices=list(STARTS))
    scenario.add_argument(
        "--codecs", default="none,snappy,lz4", help=f"comma-separated, of {', '.join(CODECS)}"
    )
    scenario.add_argument("--rate", type=float, default=20, help="messages/s per producer")
    scenario.add_argument("--dir", help="the cluster's directory (default: a new temporary one)")
    scenario.add_argument("--report", metavar="FILE", help="write the report as JSON")
    scenario.set_defaults(run=scenario_command)


def scenario_command(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from tidelog import runtime
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
        print(
            f"tidelog scenario upgrade: --codecs {args.codecs!r}: allowed: {', '.join(CODECS)}",
            file=sys.stderr,
        )
        return 2
    directory = args.dir or tempfile.mkdtemp(prefix="tidelog-upgrade-")
    cluster = LocalCluster(directory)
    try:
        print(f"starting 3 brokers at {args.start} in {directory}")
        cluster.up(
            3, overrides={**SCENARIO_OVERRIDES, **STARTS[args.start][0]}, progress=lambda _: None
        )
        report = runtime.run(
            run_upgrade_scenario(cluster, UpgradeScenario(args.start, codecs, args.rate))
        )
    except ClusterError as error:
        print(
            f"tidelog scenario upgrade: {error}\n(the cluster's files are in {directory})",
            file=sys.stderr,
        )
        return 2
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
