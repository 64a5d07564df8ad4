"""`tidelog upgrade plan|run`: the command line of the upgrade package (cli.py adds it)."""

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
        description="The KIP-32 phases as one command: plan, run (resumable, with a journal).",
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
            action.add_argument("--dry-run", action="store_true", help="print, do nothing")
            action.add_argument(
                "--timeout", type=float, default=120.0, help="seconds each check may take"
            )
            action.add_argument(
                "--settle-seconds",
                type=float,
                default=0.0,
                help="wait this long after the last step before checking its format",
            )
    upgrade.set_defaults(run=run_command)


def run_command(args: argparse.Namespace) -> int:
    from tidelog.cluster.local import ClusterError, LocalCluster
    from tidelog.config import ConfigError
    from tidelog.upgrade.run import UpgradeFailed, UpgradeRun

    cluster = LocalCluster(args.dir)
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
