"""``tidelog topic``: topics as ZooKeeper holds them, and the leaders' view of their logs."""

from __future__ import annotations

import argparse
import json

from tidelog.cli.common import ZOOKEEPER_TIMEOUT, action_parser, fail, from_cluster, key_values


def add(commands) -> None:
    topic = commands.add_parser(
        "topic",
        help="create, list, describe and configure topics",
        description="Topics in ZooKeeper.",
    )
    actions = topic.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = action_parser(actions, "create", "create a topic")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic setting")
    create.set_defaults(act=create_topic)
    listing = action_parser(actions, "list", "list topics")
    listing.set_defaults(act=list_topics)
    describe = action_parser(actions, "describe", "partitions, leaders, replicas, ISR")
    describe.add_argument("--topic")
    describe.set_defaults(act=describe_topics)
    delete = action_parser(actions, "delete", "delete a topic and its data")
    delete.add_argument("--topic", required=True)
    delete.set_defaults(act=delete_topic)
    preferred = action_parser(
        actions,
        "preferred-leader-election",
        "move leadership back to each partition's first replica",
    )
    preferred.add_argument("--topic", help="only this topic (default: every topic)")
    preferred.set_defaults(act=elect_preferred_leaders)
    more = action_parser(actions, "alter", "add partitions to a topic")
    more.add_argument("--topic", required=True)
    more.add_argument("--partitions", type=int, required=True, help="the new partition count")
    more.add_argument(
        "--replica-assignment",
        metavar="B:B,B:B",
        help="the new partitions' brokers, ',' between partitions and ':' between replicas "
        "(default: Kafka's spread)",
    )
    more.set_defaults(act=add_partitions)
    reassign = action_parser(
        actions, "reassign", "move partitions' replicas to other brokers (Kafka's JSON files)"
    )
    mode = reassign.add_mutually_exclusive_group(required=True)
    mode.add_argument("--generate", action="store_true", help="propose an assignment")
    mode.add_argument("--execute", action="store_true", help="start a reassignment")
    mode.add_argument("--verify", action="store_true", help="the status of each partition")
    reassign.add_argument(
        "--topics-to-move-json-file", metavar="FILE", help='--generate: {"topics":[{"topic":T}]}'
    )
    reassign.add_argument(
        "--broker-list", metavar="1,2,3", help="--generate: the brokers to spread over"
    )
    reassign.add_argument(
        "--reassignment-json-file",
        metavar="FILE",
        help='--execute/--verify: {"partitions":[{"topic":T,"partition":N,"replicas":[...]}]}',
    )
    reassign.add_argument(
        "--throttle",
        type=int,
        default=-1,
        metavar="BYTES_PER_S",
        help="--execute: replication of the moving replicas limited to this many bytes a "
        "second per broker (KIP-73); --verify removes it once every partition completed",
    )
    reassign.set_defaults(act=reassign_partitions)
    alter = action_parser(actions, "alter-config", "set or remove topic settings")
    alter.add_argument("--topic", required=True)
    alter.add_argument("--add-config", action="append", metavar="KEY=VALUE")
    alter.add_argument("--delete-config", action="append", metavar="KEY")
    alter.set_defaults(act=alter_config)
    for action in actions.choices.values():
        where = action.add_mutually_exclusive_group(required=True)
        where.add_argument("--zookeeper", help="ZooKeeper host:port")
        where.add_argument("--dir", help="a local cluster's state directory")
    topic.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """The action with a ZooKeeper session (--zookeeper, or the cluster's in --dir)."""
    from tidelog.cluster.local import ClusterError
    from tidelog.config import ConfigError
    from tidelog.controller import zookeeper
    from tidelog.errors import KafkaError

    try:
        client = zookeeper.connect(
            from_cluster(args, args.zookeeper, "--zookeeper host:port", lambda c: c.zookeeper),
            timeout=ZOOKEEPER_TIMEOUT,
        )
    except (ClusterError, OSError) as error:
        return fail(f"topic {args.action}", error)
    try:
        args.act(client, args)
    except (KafkaError, ConfigError, RuntimeError) as error:
        return fail(f"topic {args.action}", error)
    finally:
        client.stop()
        client.close()
    return 0


def create_topic(client, args: argparse.Namespace) -> None:
    from tidelog.controller import topics

    assignment = topics.create_topic(
        client,
        args.topic,
        args.partitions,
        args.replication_factor,
        key_values(args.config, "--config"),
    )
    print(
        f"created topic {args.topic}: "
        + ", ".join(f"partition {p} on {replicas}" for p, replicas in sorted(assignment.items()))
    )


def list_topics(client, args: argparse.Namespace) -> None:
    from tidelog.controller import zookeeper

    for name in sorted(client.get_children(zookeeper.TOPICS)):
        print(name)


def describe_topics(client, args: argparse.Namespace) -> None:
    from tidelog.controller import zookeeper

    names = [args.topic] if args.topic else sorted(client.get_children(zookeeper.TOPICS))
    brokers = zookeeper.read_brokers(client)
    for name in names:
        topic = zookeeper.read_topic(client, name)
        if topic is None:
            raise _no_topic(name)
        configs = ",".join(f"{k}={v}" for k, v in sorted(topic.config.items()))
        print(f"Topic: {name}\tPartitionCount: {len(topic.assignment)}\tConfigs: {configs}")
        leader_views: dict[int, dict] = {}
        for partition, replicas in sorted(topic.assignment.items()):
            state = topic.states.get(partition)
            leader = state.leader if state and state.leader in brokers else -1
            isr = ",".join(map(str, state.isr)) if state else ""
            print(
                f"\tTopic: {name}\tPartition: {partition}\tLeader: {leader}\t"
                f"Replicas: {','.join(map(str, replicas))}\tIsr: {isr}"
                + _log_positions(brokers, leader, name, partition, leader_views)
            )


def delete_topic(client, args: argparse.Namespace) -> None:
    from tidelog.controller import zookeeper

    try:
        zookeeper.request_topic_deletion(client, args.topic)
    except KeyError:
        raise _no_topic(args.topic) from None
    print(f"asked the controller to delete topic {args.topic}")


def elect_preferred_leaders(client, args: argparse.Namespace) -> None:
    from tidelog.controller import zookeeper

    if args.topic:
        topic = zookeeper.read_topic(client, args.topic)
        if topic is None:
            raise _no_topic(args.topic)
        found = [topic]
    else:
        found = [
            topic
            for name in sorted(client.get_children(zookeeper.TOPICS))
            if (topic := zookeeper.read_topic(client, name)) is not None
        ]
    partitions = [(topic.name, number) for topic in found for number in topic.assignment]
    zookeeper.request_preferred_leader_election(client, partitions)
    count = len(partitions)
    print(f"asked the controller for a preferred leader election of {count} partitions")


def add_partitions(client, args: argparse.Namespace) -> None:
    from tidelog.controller import topics, zookeeper

    assignment = None
    if args.replica_assignment:
        current = zookeeper.read_topic(client, args.topic)
        if current is None:
            raise _no_topic(args.topic)
        try:
            assignment = topics.parse_replica_assignment(
                args.replica_assignment, len(current.assignment)
            )
        except ValueError as error:
            raise RuntimeError(str(error)) from None
    new = topics.add_partitions(client, args.topic, args.partitions, assignment)
    print(
        f"topic {args.topic}: added "
        + ", ".join(f"partition {p} on {replicas}" for p, replicas in sorted(new.items()))
    )


def reassign_partitions(client, args: argparse.Namespace) -> None:
    """Kafka's kafka-reassign-partitions.sh: its files, and what it prints."""
    from tidelog.controller import reassignment, zookeeper

    def needs(option: str, value: str | None) -> str:
        if not value:
            raise RuntimeError(f"{option} is required here")
        return value

    def read(path: str) -> str:
        try:
            with open(path, encoding="utf-8") as file:
                return file.read()
        except OSError as error:
            raise RuntimeError(f"cannot read {path}: {error.strerror}") from None

    try:
        if args.generate:
            names = reassignment.parse_topics_to_move(
                read(needs("--topics-to-move-json-file", args.topics_to_move_json_file))
            )
            try:
                brokers = [int(b) for b in needs("--broker-list", args.broker_list).split(",")]
            except ValueError:
                raise RuntimeError("--broker-list: broker ids separated by ',' (1,2,3)") from None
            current, proposed = reassignment.generate(client, names, brokers)
            print(f"Current partition replica assignment\n{reassignment.as_json(current)}\n")
            print(
                f"Proposed partition reassignment configuration\n{reassignment.as_json(proposed)}"
            )
            return
        text = read(needs("--reassignment-json-file", args.reassignment_json_file))
        if args.verify:
            asked = dict(reassignment.parse_reassignment(text))
            print("Status of partition reassignment: ")
            for (topic, partition), state in sorted(reassignment.status(client, asked).items()):
                if state == "failed":
                    print(
                        f"ERROR: Assigned replicas don't match the list of replicas for "
                        f"reassignment ({','.join(map(str, asked[(topic, partition)]))}) for "
                        f"partition [{topic},{partition}]"
                    )
                what = {"completed": "completed successfully", "failed": "failed"}.get(
                    state, "is still in progress"
                )
                print(f"Reassignment of partition [{topic},{partition}] {what}")
            statuses = reassignment.status(client, asked).values()
            if all(s == "completed" for s in statuses) and reassignment.remove_throttle(
                client, asked
            ):
                print("Throttle was removed.")
            return
        wanted = reassignment.check(client, text)
        current = reassignment.current_assignment(client, [t for t, _ in wanted])
        if args.throttle >= 0 and zookeeper.read_reassignment(client):
            print("There is an existing assignment running.")
            reassignment.set_throttle_rate(client, current, wanted, args.throttle)
            print(f"The throttle limit was set to {args.throttle} B/s")
            return
        zookeeper.refuse_while_reassigning(client)
        reassignment.check_brokers(client, wanted)
        print(
            f"Current partition replica assignment\n\n{reassignment.as_json(current)}\n\n"
            "Save this to use as the --reassignment-json-file option during rollback"
        )
        if args.throttle >= 0:
            print(
                "Warning: You must run Verify periodically, until the reassignment completes, "
                "to ensure the throttle is removed. You can also alter the throttle by rerunning "
                "the Execute command passing a new value."
            )
            reassignment.set_throttle(client, current, wanted, args.throttle)
            print(f"The throttle limit was set to {args.throttle} B/s")
        reassignment.execute(client, wanted)
        print("Successfully started reassignment of partitions.")
    except reassignment.ReassignmentError as error:
        raise RuntimeError(str(error)) from None


def alter_config(client, args: argparse.Namespace) -> None:
    from tidelog.controller import topics

    changes: dict[str, str | None] = dict(key_values(args.add_config, "--add-config"))
    changes.update({key: None for key in args.delete_config or []})
    now = topics.alter_topic_config(client, args.topic, changes)
    print(
        f"topic {args.topic} overrides: "
        + (", ".join(f"{k}={v}" for k, v in sorted(now.items())) or "none")
    )


def _no_topic(name: str) -> Exception:
    from tidelog.errors import ErrorCode, KafkaError

    return KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")


def _log_positions(brokers, leader: int, topic: str, partition: int, views: dict) -> str:
    """The leader's log start, local log start, end and sizes (local and remote) of a
    partition, from its admin API; empty if the leader does not answer."""
    import urllib.request

    endpoint = brokers.get(leader)
    if endpoint is None or not endpoint.admin:
        return ""
    if leader not in views:
        try:
            url = f"http://{endpoint.admin}/topics/{topic}"
            with urllib.request.urlopen(url, timeout=5) as reply:
                views[leader] = json.loads(reply.read())
        except (OSError, ValueError):
            views[leader] = {}
    for entry in views[leader].get("partitions", []):
        if entry["partition"] == partition and "log_end_offset" in entry:
            return (
                f"\tLogStartOffset: {entry['log_start_offset']}"
                f"\tLocalLogStartOffset: {entry['local_log_start_offset']}"
                f"\tLogEndOffset: {entry['log_end_offset']}"
                f"\tLocalSize: {entry['local_size_bytes']}"
                f"\tRemoteLogStartOffset: {entry['remote_log_start_offset']}"
                f"\tRemoteSize: {entry['remote_size_bytes']}" + _last_clean(entry.get("last_clean"))
            )
    return ""


def _last_clean(clean: dict | None) -> str:
    """The leader's last clean of a compacted partition, as the cleaner's log line gives it."""
    if not clean:
        return ""
    dropped = clean["messages_read"] - clean["messages_written"]
    return (
        f"\tLastClean: offsets {clean['first_dirty_offset']}-{clean['end_offset']}, "
        f"{clean['bytes_read']} -> {clean['bytes_written']} bytes "
        f"({clean['size_reduction']:.1%} smaller), {dropped} messages dropped, "
        f"{clean['seconds']} s"
    )
