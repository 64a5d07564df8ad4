"""What several command groups share: an action's parser, KEY=VALUE options, the cluster an
address is read from, and the one-line failure every command ends with."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


def fail(command: str, error: Exception | str) -> int:
    """``tidelog COMMAND: error`` on stderr, and the exit code of a usage error."""
    print(f"tidelog {command}: {error}", file=sys.stderr)
    return 2


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
