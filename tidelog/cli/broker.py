"""``tidelog broker``: one broker process, run until a signal. Each broker a local cluster starts
is this command, so this module's imports are paid on every broker start: keep them few."""

from __future__ import annotations

import argparse
import logging

from tidelog.cli.common import fail, key_values


def add(commands) -> None:
    broker = commands.add_parser(
        "broker",
        help="run one broker process",
        description="Runs a broker until SIGTERM or SIGINT, then shuts down cleanly.",
    )
    broker.add_argument("--config", help="a server.properties file (required to run)")
    broker.add_argument(
        "--list-configs",
        action="store_true",
        help="list every configuration key a broker accepts, with its default, and exit",
    )
    broker.add_argument(
        "--override", action="append", metavar="KEY=VALUE", help="a setting on top of the file"
    )
    broker.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tidelog import runtime
    from tidelog.config import (
        ConfigError,
        broker_config,
        config_listing,
        not_applicable_note,
        read_properties,
    )
    from tidelog.controller.broker_node import BrokerNode

    if args.list_configs:
        print(config_listing())
        return 0
    if not args.config:
        return fail("broker", "--config is required (a server.properties file)")
    try:
        raw = read_properties(args.config)
        raw.update(key_values(args.override, "--override"))
        config = broker_config(raw)
    except (ConfigError, OSError) as error:
        return fail("broker", error)
    note = not_applicable_note(raw)
    if note:
        logging.getLogger("tidelog.config").info("%s", note)
    runtime.run(BrokerNode(config).run_until_signalled())
    return 0
