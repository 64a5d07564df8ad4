"""``tidelog cluster``: a local cluster's life, from up to down, one broker at a time between."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tidelog.cli.common import action_parser, fail, key_values

if TYPE_CHECKING:
    from tidelog.cluster.local import LocalCluster


def add(commands) -> None:
    cluster = commands.add_parser(
        "cluster",
        help="start, inspect and stop a local cluster",
        description=(
            "A local cluster: an embedded ZooKeeper and N brokers on 127.0.0.1, or each in a "
            "network namespace of its own (--netns)."
        ),
    )
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = action_parser(actions, "up", "start ZooKeeper (unless given) and N brokers")
    up.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    up.add_argument("--zookeeper", help="use this ZooKeeper (host:port) instead of starting one")
    up.add_argument("--override", action="append", metavar="KEY=VALUE", help="a broker setting")
    up.add_argument(
        "--base-port",
        type=int,
        metavar="N",
        help="fixed ports: broker i listens at N+i-1, its admin API at N+BROKERS+i-1, an "
        "embedded ZooKeeper at N+2*BROKERS (default: free ports)",
    )
    up.add_argument(
        "--netns",
        action="store_true",
        help="each broker and ZooKeeper in a network namespace of its own, on a bridge the "
        "cluster owns (needs root; network faults need it)",
    )
    up.set_defaults(act=up_cluster)
    status = action_parser(actions, "status", "show each broker: process, registration, ports")
    status.set_defaults(act=show_status)
    down = action_parser(
        actions, "down", "stop every broker, then ZooKeeper; remove its namespaces and links"
    )
    down.set_defaults(act=down_cluster)
    start = action_parser(actions, "start", "start a stopped broker")
    start.add_argument("broker_id", type=int, metavar="BROKER_ID")
    start.set_defaults(act=start_broker)
    stop = action_parser(actions, "stop", "stop a broker cleanly (SIGTERM)")
    stop.add_argument("broker_id", type=int, metavar="BROKER_ID")
    stop.set_defaults(act=stop_broker)
    kill = action_parser(actions, "kill", "send a broker a signal (default KILL)")
    kill.add_argument("broker_id", type=int, metavar="BROKER_ID")
    kill.add_argument("--signal", default="KILL", choices=["TERM", "KILL", "STOP", "CONT"])
    kill.set_defaults(act=signal_broker)
    restart = action_parser(
        actions, "restart", "stop a broker cleanly and start it again, with changed settings"
    )
    restart.add_argument("broker_id", type=int, metavar="BROKER_ID")
    restart.add_argument(
        "--override",
        action="append",
        metavar="KEY=VALUE",
        help="a setting written into the broker's server.properties",
    )
    restart.set_defaults(act=restart_broker)
    for action in actions.choices.values():
        action.add_argument("--dir", required=True, help="the cluster's state directory")
    cluster.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """The action on the cluster in --dir; a cluster's, ZooKeeper's or a setting's error is
    one line."""
    from tidelog.cluster.local import ClusterError, LocalCluster
    from tidelog.cluster.netns import NetworkError
    from tidelog.cluster.zookeeper import ZooKeeperError
    from tidelog.config import ConfigError

    cluster = LocalCluster(args.dir)
    try:
        args.act(cluster, args)
    except (ClusterError, ZooKeeperError, ConfigError, NetworkError) as error:
        return fail(f"cluster {args.action}", error)
    return 0


def up_cluster(cluster: LocalCluster, args: argparse.Namespace) -> None:
    cluster.up(
        args.brokers,
        zookeeper=args.zookeeper,
        overrides=key_values(args.override, "--override"),
        base_port=args.base_port,
        netns=args.netns,
    )
    print(f"bootstrap servers: {cluster.bootstrap_servers}")
    print(f"zookeeper: {cluster.zookeeper}")


def show_status(cluster: LocalCluster, args: argparse.Namespace) -> None:
    rows = cluster.status()
    print(f"bootstrap servers: {cluster.bootstrap_servers}")
    zookeeper_state = "running" if cluster.zookeeper_alive else "not running"
    if cluster.state and cluster.state.zookeeper_process is None:
        zookeeper_state = "external"
    print(f"zookeeper: {cluster.zookeeper} ({zookeeper_state})")
    if cluster.network is not None:
        network = cluster.network
        print(
            f"network: {network.subnet} on bridge {network.bridge} (namespaces tl{network.token}-*)"
        )
        for fault in network.faults:
            print(f"network fault in place: {fault['summary']}")
    header = ("broker", "pid", "state", "registered", "port", "admin")
    print("{:>6}  {:>8}  {:28} {:10} {:>6} {:>6}".format(*header))
    for row in rows:
        state = "running" if row["running"] else "not running"
        if row["stale"]:
            state = "not running (stale record)"
        print(
            f"{row['broker']:>6}  {row['pid'] or '-':>8}  {state:28} "
            f"{row['registered']!s:10} {row['port']:>6} {row['admin_port']:>6}"
        )


def down_cluster(cluster: LocalCluster, args: argparse.Namespace) -> None:
    cluster.down()


def start_broker(cluster: LocalCluster, args: argparse.Namespace) -> None:
    cluster.start_broker(args.broker_id)
    print(
        f"broker {args.broker_id} started (pid {cluster.broker(args.broker_id).pid}) "
        f"and registered; listening on {cluster.broker(args.broker_id).host}:"
        f"{cluster.broker(args.broker_id).port}"
    )


def stop_broker(cluster: LocalCluster, args: argparse.Namespace) -> None:
    from tidelog.config import broker_config

    settings = broker_config(cluster.broker_settings(args.broker_id))
    timeout = 30.0
    controlled = settings["controlled.shutdown.enable"]
    if controlled:
        # every attempt may wait for the controller's answer and then back off
        timeout += (
            settings["controlled.shutdown.max.retries"]
            * (
                settings["controlled.shutdown.retry.backoff.ms"]
                + settings["controller.socket.timeout.ms"]
            )
            / 1000
        )
    cluster.stop_broker(args.broker_id, timeout=timeout)
    how = "SIGTERM, controlled shutdown" if controlled else "SIGTERM"
    print(f"broker {args.broker_id} stopped cleanly ({how})")


def signal_broker(cluster: LocalCluster, args: argparse.Namespace) -> None:
    import signal

    cluster.signal_broker(args.broker_id, signal.Signals[f"SIG{args.signal}"])
    print(f"broker {args.broker_id} sent SIG{args.signal}")


def restart_broker(cluster: LocalCluster, args: argparse.Namespace) -> None:
    cluster.restart_broker(args.broker_id, key_values(args.override, "--override"))
    print(
        f"broker {args.broker_id} restarted (pid {cluster.broker(args.broker_id).pid}) "
        f"and registered; its settings: {cluster.broker(args.broker_id).config}"
    )
