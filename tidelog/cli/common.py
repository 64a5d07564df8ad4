"""What several command groups share: an action's parser, KEY=VALUE options, the cluster an
address is read from, and the one-line failures every command ends with."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from tidelog.reach import Unreachable

# What to check when a service does not answer at the address a command was given; one a
# command read from a cluster's directory (--dir) points at the cluster instead.
NEXT_STEP = {
    "ZooKeeper": "is ZooKeeper running at that address?",
    "Kafka": "is a broker listening at that address?",
    "the Docker engine": "is it running? (./scripts/docker-engine.sh starts one)",
    "Spark": "is Java installed, and JAVA_HOME (if set) right? (Spark runs on a JVM)",
    "Spark master": "is a Spark master running there, with workers registered? (see the "
    "README's reports on a Spark cluster)",
}
CLUSTER_SERVICES = ("ZooKeeper", "Kafka")
# How long a command waits for a ZooKeeper session: a live one starts it in milliseconds
ZOOKEEPER_TIMEOUT = 5.0


def fail(command: str, error: Exception | str) -> int:
    """``tidelog COMMAND: error`` on stderr, and the exit code of a usage error. A service that
    did not answer is raised on to main, whichever command caught it, to be said as every
    command says it (unreachable)."""
    if isinstance(error, Unreachable):
        raise error
    return _say(command, error)


def _say(command: str, error: Exception | str) -> int:
    print(f"tidelog {command}: {error}", file=sys.stderr)
    return 2


def unreachable(args: argparse.Namespace, error: Unreachable) -> int:
    """The one line of any command whose ZooKeeper, broker or engine did not answer: what,
    where, and what to do about it."""
    directory = getattr(args, "dir", None)
    given = getattr(args, "zookeeper", None) or getattr(args, "bootstrap_server", None)
    if directory and not given and error.service in CLUSTER_SERVICES:
        step = f"is the cluster up? (tidelog cluster status --dir {directory})"
    else:
        step = NEXT_STEP.get(error.service, "is it running at that address?")
    words = [args.command, getattr(args, "action", None) or getattr(args, "kind", None)]
    return _say(" ".join(word for word in words if word), f"{error}: {step}")


def action_parser(actions, name: str, text: str) -> argparse.ArgumentParser:
    """An action whose --help opens with what it does (its one-line help, as a sentence)."""
    return actions.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")


def key_values(pairs: list[str] | None, option: str) -> dict[str, str]:
    """KEY=VALUE options (--override, --config, ...) as a dict; ConfigError names the option."""
    from tidelog.config import ConfigError

    values = {}
    for pair in pairs or []:
        key, separator, value = pair.partition("=")
        if not separator:
            raise ConfigError(f"{option} {pair!r}: expected key=value")
        values[key.strip()] = value.strip()
    return values


def from_cluster(args: argparse.Namespace, given: str | None, option: str, pick: Callable) -> str:
    """An address given on the command line, or read from the local cluster in --dir."""
    from tidelog.cluster.local import ClusterError, LocalCluster

    if given:
        return given
    cluster = LocalCluster(args.dir)
    if cluster.state is None:
        raise ClusterError(f"no cluster in {args.dir}; give {option} or --dir DIR")
    return pick(cluster)
