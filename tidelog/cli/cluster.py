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
    status.add_argument(
        "--swarm",
        metavar="STACK",
        help="a Swarm stack's brokers instead (its tasks, as this manager's engine sees them)",
    )
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
        action.add_argument(
            "--dir",
            required=action is not status,
            help="the cluster's state directory"
            + (" (with --swarm: optional)" if action is status else ""),
        )
    _add_stack(actions)
    cluster.set_defaults(run=run)


def _add_stack(actions) -> None:
    stack = action_parser(
        actions, "stack", "write a Docker Swarm stack file made from compose.yaml's rendering"
    )
    stack.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    stack.add_argument(
        "--zookeeper", type=int, default=1, choices=[1, 3], help="one ZooKeeper or an ensemble"
    )
    stack.add_argument(
        "--remote-tier",
        metavar="volume|s3://BUCKET[/PREFIX]",
        help="the remote tier (KIP-405) on the stack's remote-tier volume, or in an S3 bucket",
    )
    stack.add_argument("--s3-endpoint", metavar="URL", help="with s3://: the S3 endpoint's URL")
    stack.add_argument(
        "--s3-credentials",
        metavar="FILE",
        help="with s3://: an AWS credentials file, given to every broker as a Swarm secret",
    )
    stack.add_argument(
        "--properties",
        metavar="FILE",
        help="server.properties settings for every broker, as a Swarm config (KAFKA_* settings "
        "of the stack's environment win over it)",
    )
    stack.add_argument(
        "--external-host",
        action="append",
        metavar="HOST|BROKER=HOST",
        help="the host a broker's EXTERNAL listener is advertised with (default: Swarm's "
        "{{.Node.Hostname}}, its node's name); BROKER=HOST for one broker; repeatable",
    )
    stack.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="PROFILE",
        help="also the services of this compose profile (report, locust, ...)",
    )
    stack.add_argument(
        "--base-port",
        type=int,
        default=19091,
        metavar="N",
        help="broker i's EXTERNAL listener on port N+i-1 of its node (default 19091)",
    )
    stack.add_argument(
        "--zookeeper-port",
        type=int,
        default=12181,
        metavar="N",
        help="ZooKeeper k's client port on port N+k-1 of its node (default 12181)",
    )
    stack.add_argument(
        "--compose-file", default="compose.yaml", help="the compose file (default ./compose.yaml)"
    )
    stack.add_argument("-o", "--output", required=True, metavar="FILE", help="the stack file")
    stack.set_defaults(act=None)


def run(args: argparse.Namespace) -> int:
    """The action on the cluster in --dir; a cluster's, ZooKeeper's or a setting's error is
    one line."""
    from tidelog.cluster.local import ClusterError, LocalCluster
    from tidelog.cluster.netns import NetworkError
    from tidelog.cluster.zookeeper import ZooKeeperError
    from tidelog.config import ConfigError

    if args.action == "stack":
        return write_stack(args)
    try:
        if getattr(args, "swarm", None):
            show_swarm_status(args.swarm, args.dir)
            return 0
        if args.dir is None:
            return fail(f"cluster {args.action}", "--dir DIR or --swarm STACK: one is needed")
        args.act(LocalCluster(args.dir), args)
    except (ClusterError, ZooKeeperError, ConfigError, NetworkError) as error:
        return fail(f"cluster {args.action}", error)
    return 0


def write_stack(args: argparse.Namespace) -> int:
    """``cluster stack``: the stack file, and what to do with it."""
    from tidelog.cluster.stack import NODE_ADDRESS, StackError, render_stack
    from tidelog.cluster.stack import write_stack as write

    default_host, hosts = NODE_ADDRESS, {}
    for value in args.external_host or []:
        broker, equals, host = value.rpartition("=")
        if not equals:
            default_host = host
        elif broker.isdigit() and host:
            hosts[int(broker)] = host
        else:
            return fail("cluster stack", f"--external-host {value!r}: allowed: HOST or BROKER=HOST")
    try:
        stack = render_stack(
            args.compose_file,
            brokers=args.brokers,
            zookeepers=args.zookeeper,
            remote_tier=args.remote_tier,
            s3_endpoint=args.s3_endpoint,
            s3_credentials=args.s3_credentials,
            properties=args.properties,
            external_host=default_host,
            external_hosts=hosts,
            profiles=tuple(args.profile),
            base_port=args.base_port,
            zookeeper_port=args.zookeeper_port,
        )
    except StackError as error:
        return fail("cluster stack", error)
    path = write(stack, args.output)
    labels = [f"tidelog.zookeeper-{n}" for n in range(1, args.zookeeper + 1)]
    labels += [f"tidelog.broker-{n}" for n in range(1, args.brokers + 1)]
    print(f"stack file written to {path}: {len(stack['services'])} services")
    print("label the nodes (docker node update --label-add LABEL=true NODE): " + " ".join(labels))
    print(f"then: docker stack deploy --compose-file {path} STACK")
    return 0


def show_swarm_status(stack: str, directory: str | None) -> None:
    from tidelog.cluster.swarm import SwarmCluster

    cluster = SwarmCluster(stack, directory)
    print(f"bootstrap servers: {cluster.bootstrap_servers}")
    print(f"zookeeper: {cluster.zookeeper}")
    # the admin APIs stay on the stack's network: no address of theirs is shown
    header = ("broker", "service", "task", "registered", "address", "node", "image")
    print("{:>6}  {:24} {:10} {:10} {:22} {:12}  {}".format(*header))
    for row in cluster.status():
        address = f"{row['host']}:{row['port']}"
        print(
            f"{row['broker']:>6}  {row['service']:24} {row['state']:10} "
            f"{row['registered']!s:10} {address:22} {row['node']:12}  {row['image']}"
        )


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
