"""Kafka's command-line tools over tidelog: what bin/kafka-*.sh run.

Each tool takes the options of Kafka 0.10.2's (as joptsimple does: ``--opt value`` or
``--opt=value``, an unambiguous prefix of a name), refuses any other by name, does its action
through the same functions as tidelog's own commands (tidelog.controller.topics,
tidelog.controller.reassignment), and prints what Kafka's prints and exits as it does, so that a
script written around Kafka's tools reads the same lines. Kafka's tools are Scala in
core/src/main/scala/kafka/admin/ (TopicCommand, ReassignPartitionsCommand).

    python -m tidelog.cli.kafka_tools kafka-topics --zookeeper 127.0.0.1:2181 --list

kafka-topics.sh also takes --bootstrap-server (as Kafka 2.2's does) on brokers of
broker.protocol.max.version 1.0 and later, whose admin APIs it calls.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable, Sequence

from kazoo.client import KazooClient

USAGE_EXIT = 1  # CommandLineUtils.printUsageAndDie


class UsageError(Exception):
    """What Kafka's tool prints before its usage, exiting 1."""


class _Parser(argparse.ArgumentParser):
    """argparse as joptsimple behaves: an unknown option is 'X is not a recognized option'."""

    def error(self, message: str):
        unknown = re.match(r"unrecognized arguments: (\S+)", message)
        if unknown:
            name = unknown.group(1).lstrip("-").split("=", 1)[0]
            raise UsageError(f"{name} is not a recognized option")
        raise UsageError(message)


def _parser(tool: str) -> _Parser:
    return _Parser(prog=f"{tool}.sh", add_help=False, allow_abbrev=True)


def _given(args: argparse.Namespace, *names: str) -> list[str]:
    return [name for name in names if getattr(args, name.replace("-", "_")) not in (None, False)]


def _require(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        if getattr(args, name.replace("-", "_")) in (None, False):
            raise UsageError(f'Missing required argument "[{name}]"')


def _refuse_with(args: argparse.Namespace, option: str, actions: Sequence[str]) -> None:
    """Kafka's checkInvalidArgs: ``option`` cannot come with any of ``actions``."""
    if getattr(args, option.replace("-", "_")) in (None, False):
        return
    for action in actions:
        if getattr(args, action.replace("-", "_")) not in (None, False):
            raise UsageError(f'Option "[{option}]" can\'t be used with option"[{action}]"')


def _connect(hosts: str) -> KazooClient:
    from tidelog.controller import zookeeper

    return zookeeper.connect(hosts, timeout=30)


# -- kafka-topics.sh -------------------------------------------------------------------------------

TOPIC_ACTIONS = ("list", "create", "delete", "alter", "describe")


def kafka_topics(argv: list[str]) -> int:
    parser = _parser("kafka-topics")
    parser.add_argument("--zookeeper")
    parser.add_argument("--bootstrap-server")
    for action in (*TOPIC_ACTIONS, "help"):
        parser.add_argument(f"--{action}", action="store_true")
    parser.add_argument("--topic")
    parser.add_argument("--config", action="append")
    parser.add_argument("--delete-config", action="append")
    parser.add_argument("--partitions", type=int)
    parser.add_argument("--replication-factor", type=int)
    parser.add_argument("--replica-assignment")
    for flag in (
        "under-replicated-partitions",
        "unavailable-partitions",
        "topics-with-overrides",
        "if-exists",
        "if-not-exists",
        "disable-rack-aware",
        "force",
    ):
        parser.add_argument(f"--{flag}", action="store_true")
    args = parser.parse_args(argv)
    if args.help:
        raise UsageError("Create, delete, describe, or change a topic.")
    chosen = _given(args, *TOPIC_ACTIONS)
    if len(chosen) != 1:
        raise UsageError(
            "Command must include exactly one action: --list, --describe, --create, --alter or "
            "--delete"
        )
    if args.bootstrap_server is not None:
        return _topics_through_brokers(args, chosen[0])
    _require(args, "zookeeper")
    if not (args.list or args.describe):
        _require(args, "topic")
    others = set(TOPIC_ACTIONS)
    _refuse_with(args, "delete-config", sorted(others - {"alter"}))
    _refuse_misplaced_topic_options(args, config_with={"alter", "create"})
    _refuse_with(args, "if-exists", sorted(others - {"alter", "delete"}))
    _refuse_with(args, "if-not-exists", sorted(others - {"create"}))
    client = _connect(args.zookeeper)
    try:
        {
            "list": _list_topics,
            "create": _create_topic,
            "delete": _delete_topics,
            "alter": _alter_topics,
            "describe": _describe_topics,
        }[chosen[0]](client, args)
    except Exception as error:  # TopicCommand: any failure is one line and exit code 1
        print(f"Error while executing topic command : {_message(error)}")
        return 1
    finally:
        client.stop()
        client.close()
    return 0


def _refuse_misplaced_topic_options(args: argparse.Namespace, config_with: set[str]) -> None:
    """kafka-topics.sh's options given with an action they do not go with, refused by name as
    Kafka's tool refuses them; ``config_with``: the actions --config goes with on this path."""
    others = set(TOPIC_ACTIONS)
    _refuse_with(args, "config", sorted(others - config_with))
    _refuse_with(args, "partitions", sorted(others - {"alter", "create"}))
    _refuse_with(args, "replication-factor", sorted(others - {"create"}))
    _refuse_with(args, "replica-assignment", sorted(others - {"create", "alter"}))
    if args.create:
        _refuse_with(args, "replica-assignment", ["partitions", "replication-factor"])
    for report in ("under-replicated-partitions", "unavailable-partitions"):
        _refuse_with(args, report, sorted(others - {"describe"}))


def _topics_through_brokers(args: argparse.Namespace, action: str) -> int:
    """kafka-topics.sh --bootstrap-server (Kafka 2.2's AdminClientTopicService): the action
    through the brokers' APIs (Metadata, CreateTopics, DeleteTopics, CreatePartitions,
    DescribeConfigs) with kafka-python's admin client; what the ZooKeeper path alone has
    (config changes, --if-exists, --if-not-exists) is refused by name, as Kafka's tool does."""
    if args.zookeeper is not None:
        raise UsageError("Only one of --bootstrap-server or --zookeeper must be specified")
    if not (args.list or args.describe):
        _require(args, "topic")
    if args.create and not args.replica_assignment:
        _require(args, "partitions", "replication-factor")
    if args.alter:
        _require(args, "partitions")
    for option in ("delete-config", "if-exists", "if-not-exists"):
        if getattr(args, option.replace("-", "_")) not in (None, False):
            raise UsageError(f'Option "[{option}]" can\'t be used with option"[bootstrap-server]"')
    _refuse_misplaced_topic_options(args, config_with={"create"})
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap_server, client_id="kafka-topics")
    try:
        names = sorted(admin.list_topics())
        if action != "create" and args.topic is not None:
            expression = re.compile(args.topic.strip().replace(",", "|"))
            names = [name for name in names if expression.fullmatch(name)]
        if action in ("alter", "delete") and not names:
            raise ValueError(f"Topics in [{','.join(names)}] does not exist")
        {
            "list": lambda: print("\n".join(names)),
            "create": lambda: _create_through_brokers(admin, args, names),
            "delete": lambda: admin.delete_topics(names),
            "alter": lambda: _alter_through_brokers(admin, args, names),
            "describe": lambda: _describe_through_brokers(admin, args, names),
        }[action]()
    except Exception as error:  # TopicCommand: any failure is one line and exit code 1
        print(f"Error while executing topic command : {_message(error)}")
        return 1
    finally:
        admin.close()
    return 0


def _create_through_brokers(admin, args: argparse.Namespace, existing: list[str]) -> None:
    from kafka.admin import NewTopic

    from tidelog.controller import topics

    if args.topic in existing:
        raise ValueError(f"Topic {args.topic} already exists")
    config = _config_pairs(args.config)
    if args.replica_assignment:
        assignment = topics.parse_replica_assignment(args.replica_assignment)
        new = NewTopic(args.topic, replica_assignments=assignment, topic_configs=config)
    else:
        new = NewTopic(args.topic, args.partitions, args.replication_factor, topic_configs=config)
    answer = admin.create_topics([new], raise_errors=False)
    _raise_errors((t["error_code"], t.get("error_message")) for t in answer["topics"])


def _alter_through_brokers(admin, args: argparse.Namespace, names: list[str]) -> None:
    from tidelog.controller import topics

    wanted = {}
    for name in names:
        if args.replica_assignment:
            current = admin.describe_topics([name])[0]["partitions"]
            replicas = topics.parse_replica_assignment(args.replica_assignment)
            added = [replicas[p] for p in sorted(replicas) if p >= len(current)]
            wanted[name] = {"count": args.partitions, "assignments": added}
        else:
            wanted[name] = args.partitions
    answer = admin.create_partitions(wanted, raise_errors=False)
    _raise_errors((r.error_code, r.error_message) for r in answer.results)


def _raise_errors(results: Iterable[tuple[int, str | None]]) -> None:
    """The first error of a CreateTopics or CreatePartitions answer, as the tool prints it."""
    from kafka import errors as kafka_errors

    for code, message in results:
        if code:
            raise ValueError(message or kafka_errors.for_code(code).__name__)


def _describe_through_brokers(admin, args: argparse.Namespace, names: list[str]) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    under = args.under_replicated_partitions
    unavailable = args.unavailable_partitions
    overrides = args.topics_with_overrides
    if not names:
        return
    configs = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name) for name in names], config_filter="all"
    ).get("topic", {})
    cluster = admin.describe_cluster()  # Metadata's brokers, under either name's keys
    live = {b.get("node_id", b.get("broker_id")) for b in cluster.get("brokers", [])}
    for topic in sorted(admin.describe_topics(names), key=lambda t: t["name"]):
        name = topic["name"]
        partitions = sorted(topic["partitions"], key=lambda p: p["partition_index"])
        # the topic's overrides, as the ZooKeeper path prints them
        set_here = {
            key: entry["value"]
            for key, entry in configs.get(name, {}).items()
            if entry["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        }
        if not under and not unavailable and (not overrides or set_here):
            text = ",".join(f"{k}={v}" for k, v in set_here.items())
            print(
                f"Topic:{name}\tPartitionCount:{len(partitions)}\t"
                f"ReplicationFactor:{len(partitions[0]['replica_nodes']) if partitions else 0}\t"
                f"Configs:{text}"
            )
        if overrides:
            continue
        for partition in partitions:
            leader = partition["leader_id"] if partition["leader_id"] >= 0 else None
            _print_partition(
                args,
                live,
                name,
                partition["partition_index"],
                leader,
                partition["replica_nodes"],
                partition["isr_nodes"],
            )


def _message(error: Exception) -> str:
    from tidelog.errors import KafkaError

    return error.message if isinstance(error, KafkaError) and error.message else str(error)


def _topics_matching(client: KazooClient, pattern: str | None) -> list[str]:
    """Kafka's Whitelist: --topic is a regular expression matched against whole names."""
    from tidelog.controller import zookeeper

    names = sorted(client.get_children(zookeeper.TOPICS))
    if pattern is None:
        return names
    expression = re.compile(pattern.strip().replace(",", "|"))
    return [name for name in names if expression.fullmatch(name)]


def _config_pairs(pairs: list[str] | None) -> dict[str, str]:
    config = {}
    for pair in pairs or []:
        parts = re.split(r"\s*=\s*", pair)
        if len(parts) != 2:
            raise ValueError(
                'Invalid topic config: all configs to be added must be in the format "key=val".'
            )
        config[parts[0].strip()] = parts[1].strip()
    return config


def _list_topics(client: KazooClient, args: argparse.Namespace) -> None:
    from tidelog.controller import zookeeper

    deleting = set(zookeeper.pending_topic_deletions(client))
    for name in _topics_matching(client, args.topic):
        print(f"{name} - marked for deletion" if name in deleting else name)


def _create_topic(client: KazooClient, args: argparse.Namespace) -> None:
    from tidelog.controller import topics
    from tidelog.errors import ErrorCode, KafkaError

    config = _config_pairs(args.config)
    if "." in args.topic or "_" in args.topic:
        print(
            "WARNING: Due to limitations in metric names, topics with a period ('.') or "
            "underscore ('_') could collide. To avoid issues it is best to use either, but "
            "not both."
        )
    try:
        if args.replica_assignment:
            assignment = topics.parse_replica_assignment(args.replica_assignment)
            topics.create_topic(client, args.topic, -1, -1, config, assignment=assignment)
        else:
            _require(args, "partitions", "replication-factor")
            topics.create_topic(
                client, args.topic, args.partitions, args.replication_factor, config
            )
    except KafkaError as error:
        if error.code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
            return
        if error.code == ErrorCode.TOPIC_ALREADY_EXISTS:
            raise KafkaError(error.code, f'Topic "{args.topic}" already exists.') from None
        raise
    print(f'Created topic "{args.topic}".')


def _alter_topics(client: KazooClient, args: argparse.Namespace) -> None:
    from tidelog.controller import topics, zookeeper
    from tidelog.coordinator.records import OFFSETS_TOPIC

    names = _topics_matching(client, args.topic)
    if not names and not args.if_exists:
        raise ValueError(f"Topic {args.topic} does not exist on ZK path {args.zookeeper}")
    for name in names:
        if args.config or args.delete_config:
            print(
                "WARNING: Altering topic configuration from this script has been deprecated "
                "and may be removed in future releases."
            )
            print("         Going forward, please use kafka-configs.sh for this functionality")
            changes: dict[str, str | None] = dict(_config_pairs(args.config))
            changes.update({key: None for key in args.delete_config or []})
            topics.alter_topic_config(client, name, changes)
            print(f'Updated config for topic "{name}".')
        if args.partitions is not None:
            if name == OFFSETS_TOPIC:
                raise ValueError(
                    "The number of partitions for the offsets topic cannot be changed."
                )
            print(
                "WARNING: If partitions are increased for a topic that has a key, the partition "
                "logic or ordering of the messages will be affected"
            )
            assignment = None
            if args.replica_assignment:
                current = zookeeper.read_topic(client, name)
                assignment = topics.parse_replica_assignment(
                    args.replica_assignment, len(current.assignment) if current else 0
                )
            topics.add_partitions(client, name, args.partitions, assignment)
            print("Adding partitions succeeded!")


def _delete_topics(client: KazooClient, args: argparse.Namespace) -> None:
    from tidelog.controller import zookeeper
    from tidelog.coordinator.records import OFFSETS_TOPIC

    names = _topics_matching(client, args.topic)
    if not names and not args.if_exists:
        raise ValueError(f"Topic {args.topic} does not exist on ZK path {args.zookeeper}")
    deleting = set(zookeeper.pending_topic_deletions(client))
    for name in names:
        if name == OFFSETS_TOPIC:
            raise ValueError(
                f"Topic {name} is a kafka internal topic and is not allowed to be marked for "
                "deletion."
            )
        if name in deleting:
            print(f"Topic {name} is already marked for deletion.")
            continue
        zookeeper.request_topic_deletion(client, name)
        print(f"Topic {name} is marked for deletion.")
        print("Note: This will have no impact if delete.topic.enable is not set to true.")


def _print_partition(
    args: argparse.Namespace,
    live: set[int],
    topic: str,
    partition: int,
    leader: int | None,
    replicas: Sequence[int],
    isr: Sequence[int],
) -> None:
    """A partition's line of kafka-topics.sh --describe, unless --under-replicated-partitions or
    --unavailable-partitions leave it out."""
    under, unavailable = args.under_replicated_partitions, args.unavailable_partitions
    if (
        (not under and not unavailable)
        or (under and len(isr) < len(replicas))
        or (unavailable and (leader is None or leader not in live))
    ):
        print(
            f"\tTopic: {topic}\tPartition: {partition}\t"
            f"Leader: {'none' if leader is None else leader}\t"
            f"Replicas: {','.join(map(str, replicas))}\tIsr: {','.join(map(str, isr))}"
        )


def _describe_topics(client: KazooClient, args: argparse.Namespace) -> None:
    from tidelog.controller import zookeeper

    under = args.under_replicated_partitions
    unavailable = args.unavailable_partitions
    overrides = args.topics_with_overrides
    live = set(zookeeper.read_brokers(client))
    for name in _topics_matching(client, args.topic):
        topic = zookeeper.read_topic(client, name)
        if topic is None:
            print(f"Topic {name} doesn't exist!")
            continue
        if not under and not unavailable and (not overrides or topic.config):
            configs = ",".join(f"{k}={v}" for k, v in topic.config.items())
            replication_factor = len(next(iter(topic.assignment.values()), ()))
            print(
                f"Topic:{name}\tPartitionCount:{len(topic.assignment)}\t"
                f"ReplicationFactor:{replication_factor}\tConfigs:{configs}"
            )
        if overrides:
            continue
        for partition, replicas in sorted(topic.assignment.items()):
            state = topic.states.get(partition)
            isr = list(state.isr) if state else []
            leader = state.leader if state else None
            _print_partition(args, live, name, partition, leader, replicas, isr)


# -- kafka-reassign-partitions.sh ------------------------------------------------------------------


def kafka_reassign_partitions(argv: list[str]) -> int:
    parser = _parser("kafka-reassign-partitions")
    parser.add_argument("--zookeeper")
    for action in ("generate", "execute", "verify", "disable-rack-aware"):
        parser.add_argument(f"--{action}", action="store_true")
    parser.add_argument("--reassignment-json-file")
    parser.add_argument("--topics-to-move-json-file")
    parser.add_argument("--broker-list")
    parser.add_argument("--throttle", type=int, default=-1)
    args = parser.parse_args(argv)
    if len(_given(args, "generate", "execute", "verify")) != 1:
        raise UsageError(
            "Command must include exactly one action: --generate, --execute or --verify"
        )
    _require(args, "zookeeper")
    if args.verify:
        if not args.reassignment_json_file:
            raise UsageError(
                "If --verify option is used, command must include --reassignment-json-file "
                "that was used during the --execute option"
            )
        for option in ("topics-to-move-json-file", "disable-rack-aware", "broker-list"):
            _refuse_with(args, option, ["verify"])
        if args.throttle >= 0:
            raise UsageError('Option "[verify]" can\'t be used with option"[throttle]"')
    elif args.generate:
        if not (args.topics_to_move_json_file and args.broker_list):
            raise UsageError(
                "If --generate option is used, command must include both "
                "--topics-to-move-json-file and --broker-list options"
            )
        _refuse_with(args, "reassignment-json-file", ["generate"])
        if args.throttle >= 0:
            raise UsageError('Option "[generate]" can\'t be used with option"[throttle]"')
    else:
        if not args.reassignment_json_file:
            raise UsageError(
                "If --execute option is used, command must include --reassignment-json-file "
                "that was output during the --generate option"
            )
        for option in ("topics-to-move-json-file", "disable-rack-aware", "broker-list"):
            _refuse_with(args, option, ["execute"])
    # the same code as `tidelog topic reassign`, which prints what Kafka's tool prints
    from tidelog.cli.topic import reassign_partitions

    client = _connect(args.zookeeper)
    try:
        reassign_partitions(client, args)
    except Exception as error:  # ReassignPartitionsCommand prints the failure and exits 0
        print(f"Partitions reassignment failed due to {_message(error)}")
    finally:
        client.stop()
        client.close()
    return 0


# -- kafka-preferred-replica-election.sh -----------------------------------------------------


def kafka_preferred_replica_election(argv: list[str]) -> int:
    import json

    from tidelog.controller import zookeeper

    parser = _parser("kafka-preferred-replica-election")
    parser.add_argument("--zookeeper")
    parser.add_argument("--path-to-json-file")
    if not argv:
        raise UsageError(
            "This tool causes leadership for each partition to be transferred back to the "
            "'preferred replica', it can be used to balance leadership among the servers."
        )
    args = parser.parse_args(argv)
    _require(args, "zookeeper")
    client = _connect(args.zookeeper)
    try:
        every = {
            (name, p)
            for name in client.get_children(zookeeper.TOPICS)
            if (topic := zookeeper.read_topic(client, name)) is not None
            for p in topic.assignment
        }
        if args.path_to_json_file:
            with open(args.path_to_json_file, encoding="utf-8") as file:
                document = json.loads(file.read() or "null")
            if not isinstance(document, dict) or "partitions" not in document:
                raise ValueError("Preferred replica election data is empty")
            asked = [(str(p["topic"]), int(p["partition"])) for p in document["partitions"]]
            twice = sorted({key for key in asked if asked.count(key) > 1})
            if twice:
                raise ValueError(
                    "Preferred replica election data contains duplicate partitions: "
                    + ",".join(f"[{t},{p}]" for t, p in twice)
                )
        else:
            asked = sorted(every)
        valid = [key for key in asked if key in every]
        zookeeper.request_preferred_leader_election(client, valid)
        written = json.dumps(
            {
                "version": 1,
                "partitions": [{"topic": t, "partition": p} for t, p in sorted(valid)],
            },
            separators=(",", ":"),
        )
        print(f"Created preferred replica election path with {written}")
        listed = ", ".join(f"[{t},{p}]" for t, p in sorted(valid))
        print(f"Successfully started preferred replica election for partitions Set({listed})")
        for name, partition in asked:
            if (name, partition) not in every:
                print(
                    f"Skipping preferred replica leader election for partition [{name},"
                    f"{partition}] since it doesn't exist."
                )
    except Exception as error:  # Kafka's: the failure printed, exit code 0
        print("Failed to start preferred replica election")
        print(_message(error))
    finally:
        client.stop()
        client.close()
    return 0


# -- kafka-configs.sh ------------------------------------------------------------------------

ENTITY_TYPES = ("topics", "clients", "users", "brokers")


def _split_configs(text: str) -> dict[str, str]:
    """'k1=v1,k2=[v1,v2],k3=v3': commas inside [] belong to the value (Kafka's parsing)."""
    config = {}
    for pair in re.split(r",(?=[^\]]*(?:\[|$))", text):
        key, separator, value = pair.partition("=")
        if not separator:
            raise ValueError(f"Invalid config: {pair!r} is not key=value")
        config[key.strip()] = value.strip().removeprefix("[").removesuffix("]")
    return config


def kafka_configs(argv: list[str]) -> int:
    from tidelog.controller import topics, zookeeper
    from tidelog.replication import throttle

    parser = _parser("kafka-configs")
    parser.add_argument("--zookeeper")
    for flag in ("alter", "describe", "help", "force"):
        parser.add_argument(f"--{flag}", action="store_true")
    parser.add_argument("--entity-type", action="append")
    parser.add_argument("--entity-name", action="append")
    parser.add_argument("--entity-default", action="store_true")
    parser.add_argument("--add-config")
    parser.add_argument("--delete-config")
    args = parser.parse_args(argv)
    if args.help:
        raise UsageError("Add/Remove entity config for a topic, client, user or broker")
    if len(_given(args, "alter", "describe")) != 1:
        raise UsageError("Command must include exactly one action: --describe, --alter")
    _require(args, "zookeeper")
    if not args.entity_type:
        raise UsageError("At least one --entity-type must be specified")
    entity_type = args.entity_type[0]
    if entity_type not in ENTITY_TYPES:
        raise UsageError(
            f"Invalid entity-type {entity_type}, --entity-type must be one of "
            f"{', '.join(ENTITY_TYPES)}"
        )
    if entity_type in ("clients", "users"):
        raise UsageError(
            f"--entity-type {entity_type}: tidelog has no client or user quotas; topics and "
            "brokers only"
        )
    name = (args.entity_name or [None])[0]
    if args.alter and name is None:
        raise UsageError(f"--entity-name must be specified with --alter of {entity_type}")
    if args.alter and not (args.add_config or args.delete_config):
        raise UsageError(
            "At least one of --add-config or --delete-config must be specified with --alter"
        )
    label = "topic" if entity_type == "topics" else entity_type
    client = _connect(args.zookeeper)
    try:
        if args.describe:
            if entity_type == "topics":
                names = [name] if name else sorted(client.get_children(zookeeper.TOPICS))
                found = [(n, zookeeper.read_topic_config(client, n)) for n in names]
            else:
                ids = [name] if name else sorted(zookeeper.read_brokers(client), key=int)
                found = [
                    (
                        str(b),
                        zookeeper.parse_entity_config(
                            client.get(zookeeper.broker_config_path(int(b)))[0]
                            if client.exists(zookeeper.broker_config_path(int(b)))
                            else None
                        ),
                    )
                    for b in ids
                ]
            for entity, config in found:
                pairs = ",".join(f"{k}={v}" for k, v in config.items())
                print(f"Configs for {label} '{entity}' are {pairs}")
            return 0
        assert name is not None
        added = _split_configs(args.add_config) if args.add_config else {}
        removed = [k.strip() for k in args.delete_config.split(",")] if args.delete_config else []
        if entity_type == "topics":
            current = zookeeper.read_topic_config(client, name)
        else:
            try:
                broker_id = int(name)
            except ValueError:
                raise ValueError(
                    f"Error parsing broker {name}. The broker's Entity Name must be a single "
                    "integer value"
                ) from None
            path = zookeeper.broker_config_path(broker_id)
            current = zookeeper.parse_entity_config(
                client.get(path)[0] if client.exists(path) else None
            )
            dynamic = (throttle.LEADER_RATE, throttle.FOLLOWER_RATE)
            unknown = sorted(set(added) - set(dynamic))
            if unknown:
                raise ValueError(
                    f"Unknown Dynamic Configuration '{unknown[0]}'. (a broker's dynamic "
                    f"settings: {', '.join(dynamic)})"
                )
            for key in dynamic:
                if key in added and not added[key].isdigit():
                    raise ValueError(f"{key}: {added[key]!r} is not a number of bytes a second")
        missing = [k for k in removed if k not in current]
        if missing:
            raise ValueError(f"Invalid config(s): {','.join(missing)}")
        changes: dict[str, str | None] = {**added, **{k: None for k in removed}}
        if entity_type == "topics":
            topics.alter_topic_config(client, name, changes)
        else:
            zookeeper.change_broker_config(client, int(name), changes)
        print(f"Completed Updating config for entity: {label} '{name}'.")
    except Exception as error:  # ConfigCommand: the failure printed, exit code 0
        print(f"Error while executing config command {_message(error)}")
    finally:
        client.stop()
        client.close()
    return 0


# -- kafka-delete-records.sh ------------------------------------------------------------------

OFFSET_JSON_VERSION = 1  # DeleteRecordsCommand.EarliestVersion: a file without "version"


def parse_offset_json(text: str) -> list[tuple[str, int, int]]:
    """Kafka 2.1's offset JSON file, {"partitions": [{"topic", "partition", "offset"}],
    "version": 1}, as (topic, partition, offset) in file order; ValueError with Kafka's words
    for what it refuses (not JSON, another version, no partitions, a field missing or of the
    wrong type, a partition named twice)."""
    import json

    try:
        document = json.loads(text)
    except ValueError:
        raise ValueError("The input string is not a valid JSON") from None
    if not isinstance(document, dict):
        raise ValueError("The input string is not a valid JSON object")
    version = document.get("version", OFFSET_JSON_VERSION)
    if version != OFFSET_JSON_VERSION:
        raise ValueError(f"Not supported version field value {version}")
    partitions = document.get("partitions")
    if not isinstance(partitions, list):
        raise ValueError("Missing partitions field")
    wanted: list[tuple[str, int, int]] = []
    for entry in partitions:
        if not isinstance(entry, dict):
            raise ValueError(f"a partition entry is an object, not {entry!r}")
        topic, partition, offset = (entry.get(k) for k in ("topic", "partition", "offset"))
        if not isinstance(topic, str):
            raise ValueError(f'"topic" is a string in {json.dumps(entry)}')
        for name, value in (("partition", partition), ("offset", offset)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f'"{name}" is an integer in {json.dumps(entry)}')
        assert isinstance(partition, int) and isinstance(offset, int)
        wanted.append((topic, partition, offset))
    named = [f"{t}-{p}" for t, p, _ in wanted]
    duplicates = sorted({name for name in named if named.count(name) > 1})
    if duplicates:
        raise ValueError(
            f"Offset json file contains duplicate topic partitions: {','.join(duplicates)}"
        )
    return wanted


def kafka_delete_records(argv: list[str]) -> int:
    """Kafka 2.1's kafka-delete-records.sh: the records below each offset of the JSON file
    deleted through DeleteRecords (brokers of broker.protocol.max.version 0.11.0 and later),
    with Kafka's lines: one per partition, its low watermark or its error."""
    parser = _parser("kafka-delete-records")
    parser.add_argument("--bootstrap-server")
    parser.add_argument("--offset-json-file")
    parser.add_argument("--command-config")
    parser.add_argument("--help", action="store_true")
    args = parser.parse_args(argv)
    if args.help:
        raise UsageError(
            "This tool helps to delete records of the given partitions down to the "
            "specified offset."
        )
    _require(args, "bootstrap-server", "offset-json-file")
    try:
        with open(args.offset_json_file, encoding="utf-8") as file:
            wanted = parse_offset_json(file.read())
        settings = _admin_settings(args.command_config)
    except (OSError, ValueError) as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    from kafka import KafkaAdminClient, TopicPartition
    from kafka import errors as kafka_errors

    print("Executing records delete operation")
    admin = KafkaAdminClient(
        bootstrap_servers=args.bootstrap_server, client_id="kafka-delete-records", **settings
    )
    try:
        lines = []
        for topic, partition, offset in wanted:
            key = TopicPartition(topic, partition)
            try:
                answer = admin.delete_records({key: offset})[key]
                lines.append(
                    f"partition: {topic}-{partition}\tlow_watermark: {answer['low_watermark']}"
                )
            except kafka_errors.KafkaError as error:
                cause = type(error)
                description = getattr(cause, "description", "") or str(error)
                lines.append(
                    f"partition: {topic}-{partition}\terror: {cause.__name__}: {description}"
                )
        print("Records delete operation completed:")
        print("\n".join(lines))
    finally:
        admin.close()
    return 0


def _admin_settings(path: str | None) -> dict[str, object]:
    """--command-config: the admin client properties tidelog's tool takes (request.timeout.ms),
    any other refused by name."""
    if path is None:
        return {}
    with open(path, encoding="utf-8") as file:
        properties = _properties(
            [line.strip() for line in file if line.strip() and not line.startswith("#")]
        )
    settings: dict[str, object] = {}
    for name, value in properties.items():
        if name == "bootstrap.servers":
            continue  # --bootstrap-server wins, as in Kafka's tool
        if name != "request.timeout.ms":
            raise ValueError(
                f"--command-config {name}: tidelog's kafka-delete-records.sh takes "
                "request.timeout.ms only"
            )
        if not value.isdigit():
            raise ValueError(f"--command-config request.timeout.ms={value}: a number of ms")
        settings["request_timeout_ms"] = int(value)
    return settings


# -- kafka-consumer-groups.sh ------------------------------------------------------------------


def kafka_consumer_groups(argv: list[str]) -> int:
    parser = _parser("kafka-consumer-groups")
    parser.add_argument("--zookeeper")
    parser.add_argument("--bootstrap-server")
    parser.add_argument("--group", action="append")
    parser.add_argument("--topic")
    for flag in ("list", "describe", "delete", "new-consumer"):
        parser.add_argument(f"--{flag}", action="store_true")
    parser.add_argument("--command-config")
    if not argv:
        raise UsageError(
            "List all consumer groups, describe a consumer group, or delete consumer group info."
        )
    args = parser.parse_args(argv)
    if len(_given(args, "list", "describe", "delete")) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --delete")
    if args.zookeeper is not None:
        raise UsageError(
            "zookeeper: tidelog keeps no ZooKeeper-based (old consumer) groups; its groups are "
            "the Java consumer's: use --bootstrap-server"
        )
    _require(args, "bootstrap-server")
    if args.delete:
        raise UsageError(
            "Option '[delete]' is only valid with '[zookeeper]'. Note that there's no need to "
            "delete group metadata for the new consumer as the group is deleted when the last "
            "committed offset for that group expires."
        )
    if args.describe:
        _require(args, "group")
    _refuse_with(args, "group", ["list"])
    _refuse_with(args, "topic", ["list", "describe"])
    if args.command_config is not None:
        raise UsageError("command-config: tidelog's listeners take no client security settings")
    print(
        "Note: This will only show information about consumers that use the Java consumer API "
        "(non-ZooKeeper-based consumers).\n",
        file=sys.stderr,
    )
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap_server, client_id="kafka-tools")
    try:
        if args.list:
            for group in sorted(g["group_id"] for g in admin.list_groups()):
                print(group)
            return 0
        group = args.group[0]
        described = admin.describe_groups([group])[group]
        state = described.get("group_state")
        members = described.get("members") or []
        committed = _committed_offsets(args.bootstrap_server, group)
        if state == "Dead" or (not committed and not members):
            print(f"Error: Consumer group '{group}' does not exist.")
            return 0
        rows: list[tuple[str, int, str, str, str]] = []  # topic, partition, member, host, client
        assigned: set[tuple[str, int]] = set()
        for member in sorted(members, key=lambda m: -sum(len(p) for _, p in _assignment(m))):
            for topic, partitions in _assignment(member):
                for partition in sorted(partitions):
                    assigned.add((topic, partition))
                    rows.append(
                        (
                            topic,
                            partition,
                            member.get("member_id", "-"),
                            member.get("client_host", "-"),
                            member.get("client_id", "-"),
                        )
                    )
        rows += [
            (tp.topic, tp.partition, "-", "-", "-")
            for tp in sorted(committed)
            if (tp.topic, tp.partition) not in assigned
        ]
        consumer = KafkaConsumer(bootstrap_servers=args.bootstrap_server)
        try:
            ends = consumer.end_offsets([TopicPartition(t, p) for t, p, *_ in rows])
        finally:
            consumer.close()
        if state == "Empty":
            print(f"Consumer group '{group}' has no active members.", file=sys.stderr)
        elif state in ("PreparingRebalance", "AwaitingSync", "CompletingRebalance"):
            print(f"Warning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
        print("\n" + _group_row("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                  "CONSUMER-ID", "HOST", "CLIENT-ID"))  # fmt: skip
        for topic, partition, member_id, host, client_id in rows:
            key = TopicPartition(topic, partition)
            offset = committed.get(key)
            end = ends.get(key)
            lag = end - offset if offset is not None and end is not None else None
            print(
                _group_row(
                    topic,
                    partition,
                    "-" if offset is None else offset,
                    "-" if end is None else end,
                    "-" if lag is None else lag,
                    member_id,
                    host,
                    client_id,
                )
            )
    except Exception as error:
        print(f"Error: Executing consumer group command failed due to {_message(error)}")
    finally:
        admin.close()
    return 0


def _committed_offsets(bootstrap: str, group: str) -> dict:
    """The group's committed offsets, asked partition by partition with OffsetFetch v1 (the
    version tidelog serves; kafka-python's admin client asks for v2 and up)."""
    from kafka import KafkaConsumer, TopicPartition

    reader = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        found = {}
        for topic in sorted(reader.topics() - {"__consumer_offsets"}):
            for partition in sorted(reader.partitions_for_topic(topic) or ()):
                key = TopicPartition(topic, partition)
                offset = reader.committed(key)
                if offset is not None and offset >= 0:
                    found[key] = offset
        return found
    finally:
        reader.close()


def _group_row(*cells: object) -> str:
    """ConsumerGroupCommand's columns: "%-30s %-10s %-15s %-15s %-10s %-50s%-30s %s"."""
    topic, partition, offset, end, lag, member, host, client = (str(c) for c in cells)
    return (
        f"{topic:<30} {partition:<10} {offset:<15} {end:<15} {lag:<10} {member:<50}"
        f"{host:<30} {client}"
    )


def _assignment(member: dict) -> list[tuple[str, list[int]]]:
    """A member's assigned partitions as kafka-python's admin client gives them (a decoded
    consumer protocol assignment), or none."""
    assignment = member.get("member_assignment")
    if isinstance(assignment, dict):
        found = assignment.get("assignment") or assignment.get("assigned_partitions") or []
    else:
        found = getattr(assignment, "assignment", None) or []
    pairs = []
    for entry in found:
        if isinstance(entry, dict):
            pairs.append((str(entry.get("topic")), list(entry.get("partitions", []))))
        else:
            topic, partitions = entry
            pairs.append((topic, list(partitions)))
    return pairs


# -- kafka-console-producer.sh / kafka-console-consumer.sh -------------------------------------


def _properties(pairs: list[str] | None) -> dict[str, str]:
    found = {}
    for pair in pairs or []:
        key, separator, value = pair.partition("=")
        if not separator:
            raise UsageError(f"Invalid property {pair!r}: key=value expected")
        found[key.strip()] = value
    return found


def kafka_console_producer(argv: list[str]) -> int:
    """Lines of stdin as messages (with parse.key, key and value split at key.separator)."""
    parser = _parser("kafka-console-producer")
    parser.add_argument("--broker-list")
    parser.add_argument("--topic")
    parser.add_argument("--sync", action="store_true")
    parser.add_argument("--compression-codec", nargs="?", const="gzip")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--message-send-max-retries", type=int, default=3)
    parser.add_argument("--retry-backoff-ms", type=int, default=100)
    parser.add_argument("--timeout", type=int, default=1000)  # linger, in ms
    parser.add_argument("--request-required-acks", default="1")
    parser.add_argument("--request-timeout-ms", type=int, default=1500)
    parser.add_argument("--max-block-ms", type=int, default=60000)
    parser.add_argument("--property", action="append")
    parser.add_argument("--producer-property", action="append")
    args = parser.parse_args(argv)
    _require(args, "broker-list", "topic")
    codecs = {"none": None, "gzip": "gzip", "snappy": "snappy", "lz4": "lz4"}
    if args.compression_codec is not None and args.compression_codec not in codecs:
        raise UsageError(
            f"compression-codec: {args.compression_codec!r}; one of none, gzip, snappy, lz4"
        )
    reader = _properties(args.property)
    parse_key = reader.get("parse.key", "false").lower() == "true"
    separator = reader.get("key.separator", "\t")
    from kafka import KafkaProducer

    acks: int | str = (
        "all" if args.request_required_acks in ("all", "-1") else int(args.request_required_acks)
    )
    producer = KafkaProducer(
        bootstrap_servers=args.broker_list,
        acks=acks,
        retries=args.message_send_max_retries,
        retry_backoff_ms=args.retry_backoff_ms,
        linger_ms=0 if args.sync else args.timeout,
        request_timeout_ms=args.request_timeout_ms,
        max_block_ms=args.max_block_ms,
        compression_type=codecs.get(args.compression_codec or "none"),
        **({"batch_size": args.batch_size} if args.batch_size else {}),
        **{k.replace(".", "_"): v for k, v in _properties(args.producer_property).items()},
    )
    failed = 0
    try:
        for line in sys.stdin:
            text = line.rstrip("\n")
            key = None
            if parse_key:
                key_text, found, text = text.partition(separator)
                if not found:
                    print(f"No key found on line: {line.rstrip()}", file=sys.stderr)
                    failed += 1
                    continue
                key = key_text.encode()
            future = producer.send(args.topic, value=text.encode(), key=key)
            if args.sync:
                future.get(timeout=args.max_block_ms / 1000)
        producer.flush()
    finally:
        producer.close()
    return 1 if failed else 0


def kafka_console_consumer(argv: list[str]) -> int:
    """Messages to stdout, one a line; 'Processed a total of N messages' on stderr at the end."""
    parser = _parser("kafka-console-consumer")
    parser.add_argument("--zookeeper")
    parser.add_argument("--bootstrap-server")
    parser.add_argument("--topic")
    parser.add_argument("--whitelist")
    parser.add_argument("--partition", type=int)
    parser.add_argument("--offset", default="latest")
    parser.add_argument("--from-beginning", action="store_true")
    parser.add_argument("--max-messages", type=int)
    parser.add_argument("--timeout-ms", type=int)
    parser.add_argument("--skip-message-on-error", action="store_true")
    parser.add_argument("--new-consumer", action="store_true")
    parser.add_argument("--property", action="append")
    parser.add_argument("--consumer-property", action="append")
    args = parser.parse_args(argv)
    if args.zookeeper is not None:
        raise UsageError(
            "zookeeper: tidelog serves the new (Java) consumer only; use --bootstrap-server"
        )
    _require(args, "bootstrap-server")
    if bool(args.topic) == bool(args.whitelist):
        raise UsageError("Exactly one of whitelist/topic is required.")
    printing = _properties(args.property)
    print_key = printing.get("print.key", "false").lower() == "true"
    print_timestamp = printing.get("print.timestamp", "false").lower() == "true"
    key_separator = printing.get("key.separator", "\t")
    from kafka import KafkaConsumer, TopicPartition

    settings: dict[str, str | None] = {
        k.replace(".", "_"): v for k, v in _properties(args.consumer_property).items()
    }
    settings.setdefault("group_id", None)
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap_server,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        enable_auto_commit=settings.get("group_id") is not None,
        **settings,
    )
    count = 0
    try:
        if args.partition is not None:
            assigned = TopicPartition(args.topic, args.partition)
            consumer.assign([assigned])
            if args.offset == "earliest" or args.from_beginning:
                consumer.seek_to_beginning(assigned)
            elif args.offset == "latest":
                consumer.seek_to_end(assigned)
            else:
                consumer.seek(assigned, int(args.offset))
        elif args.whitelist:
            consumer.subscribe(pattern=args.whitelist.replace(",", "|"))
        else:
            consumer.subscribe([args.topic])
        import time

        idle_since = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            batches = consumer.poll(timeout_ms=200)
            if not batches:
                if (
                    args.timeout_ms is not None
                    and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms
                ):
                    break
                continue
            idle_since = time.monotonic()
            for records in batches.values():
                for record in records:
                    if args.max_messages is not None and count >= args.max_messages:
                        break
                    parts = []
                    if print_timestamp:
                        kind = "CreateTime" if record.timestamp_type == 0 else "LogAppendTime"
                        parts.append(f"{kind}:{record.timestamp}")
                    if print_key:
                        parts.append((record.key or b"null").decode(errors="replace"))
                    parts.append((record.value or b"null").decode(errors="replace"))
                    print(key_separator.join(parts), flush=True)
                    count += 1
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


# -- kafka-run-class.sh kafka.tools.DumpLogSegments --------------------------------------------


def kafka_run_class(argv: list[str]) -> int:
    """The one class tidelog runs: kafka.tools.DumpLogSegments, as `tidelog dump-log`."""
    if not argv or argv[0] != "kafka.tools.DumpLogSegments":
        raise UsageError(
            f"{argv[0] if argv else '(no class)'}: tidelog's kafka-run-class.sh runs "
            "kafka.tools.DumpLogSegments only"
        )
    parser = _parser("kafka-run-class")
    parser.add_argument("--files")
    for flag in ("print-data-log", "verify-index-only", "index-sanity-check", "deep-iteration"):
        parser.add_argument(f"--{flag}", action="store_true")
    parser.add_argument("--max-message-size", type=int)
    args = parser.parse_args(argv[1:])
    _require(args, "files")
    from tidelog.cli import main as tidelog

    command = ["dump-log", *[f for f in args.files.split(",") if f]]
    if args.deep_iteration:
        command.append("--deep-iteration")
    if args.print_data_log:
        command.append("--print-data-log")
    if args.verify_index_only or args.index_sanity_check:
        command.append("--verify-index")
    return tidelog(command)


# -- kafka-producer-perf-test.sh / kafka-consumer-perf-test.sh ---------------------------------

PERF_PRODUCER_PROPS = ("bootstrap.servers", "acks", "compression.type", "batch.size", "linger.ms")


def kafka_producer_perf_test(argv: list[str]) -> int:
    """tidelog perf produce with Kafka's options; Kafka's ProducerPerformance final line."""
    import asyncio

    from tidelog.perf.producer import ProducerSettings, run_producer
    from tidelog.records.format import Codec

    parser = _parser("kafka-producer-perf-test")
    parser.add_argument("--topic")
    parser.add_argument("--num-records", type=int)
    parser.add_argument("--record-size", type=int)
    parser.add_argument("--payload-file")
    parser.add_argument("--throughput", type=float)
    parser.add_argument("--producer-props", nargs="+")
    parser.add_argument("--producer.config", dest="producer_config")
    parser.add_argument("--print-metrics", action="store_true")
    args = parser.parse_args(argv)
    _require(args, "topic", "num-records", "throughput", "producer-props")
    if args.payload_file or args.producer_config or args.print_metrics:
        given = (
            "payload-file"
            if args.payload_file
            else ("producer.config" if args.producer_config else "print-metrics")
        )
        raise UsageError(f"{given}: not supported by tidelog's perf producer; use --record-size")
    _require(args, "record-size")
    props = _properties(args.producer_props)
    unknown = sorted(set(props) - set(PERF_PRODUCER_PROPS))
    if unknown:
        raise UsageError(
            f"--producer-props {unknown[0]}: tidelog's perf producer takes "
            f"{', '.join(PERF_PRODUCER_PROPS)}"
        )
    if "bootstrap.servers" not in props:
        raise UsageError("--producer-props must include bootstrap.servers=HOST:PORT")
    acks = props.get("acks", "1")
    codec = props.get("compression.type", "none").upper()
    if codec not in Codec.__members__:
        raise UsageError(f"compression.type {codec.lower()!r}: one of none, gzip, snappy, lz4")
    settings = ProducerSettings(
        topic=args.topic,
        num_records=args.num_records,
        record_size=args.record_size,
        throughput=args.throughput,
        acks=-1 if acks == "all" else int(acks),
        codec=Codec[codec],
        batch_size=int(props.get("batch.size", 16384)),
        linger_ms=float(props.get("linger.ms", 0)),
    )
    summary, _errors = asyncio.run(run_producer(props["bootstrap.servers"], settings))
    latency = summary.latency()
    megabytes = summary.bytes / summary.seconds / 1024 / 1024 if summary.seconds else 0.0
    print(
        f"{summary.records} records sent, {summary.records_per_second:f} records/sec "
        f"({megabytes:.2f} MB/sec), {latency['avg']:.2f} ms avg latency, "
        f"{latency['max']:.2f} ms max latency, {int(latency['p50'])} ms 50th, "
        f"{int(latency['p95'])} ms 95th, {int(latency['p99'])} ms 99th, "
        f"{int(latency['p99.9'])} ms 99.9th."
    )
    return 0


def kafka_consumer_perf_test(argv: list[str]) -> int:
    """tidelog perf consume with Kafka's options; ConsumerPerformance's header and row."""
    import asyncio
    import time

    from tidelog.perf.consumer import run_consumer

    parser = _parser("kafka-consumer-perf-test")
    parser.add_argument("--zookeeper")
    parser.add_argument("--broker-list")
    parser.add_argument("--topic")
    parser.add_argument("--messages", type=int)
    parser.add_argument("--fetch-size", type=int, default=1024 * 1024)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--new-consumer", action="store_true")
    parser.add_argument("--hide-header", action="store_true")
    parser.add_argument("--show-detailed-stats", action="store_true")
    parser.add_argument("--reporting-interval", type=int, default=5000)
    parser.add_argument("--timeout", type=int, default=10000)
    args = parser.parse_args(argv)
    if args.zookeeper is not None:
        raise UsageError("zookeeper: tidelog serves the new consumer only; use --broker-list")
    _require(args, "broker-list", "topic", "messages")
    started = time.time()
    summary = asyncio.run(
        run_consumer(
            args.broker_list,
            args.topic,
            args.messages,
            fetch_size=args.fetch_size,
            timeout=args.timeout / 1000,
            progress=(lambda line: print(line, file=sys.stderr))
            if args.show_detailed_stats
            else (lambda _: None),
        )
    )
    ended = time.time()
    if not args.hide_header:
        print("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec")
    megabytes = summary.bytes / 1024 / 1024
    seconds = max(ended - started, 1e-9)
    print(
        f"{_kafka_date(started)}, {_kafka_date(ended)}, {megabytes:.4f}, "
        f"{megabytes / seconds:.4f}, {summary.records}, {summary.records / seconds:.4f}"
    )
    return 0


def _kafka_date(seconds: float) -> str:
    """ConsumerPerformance's default --date-format, yyyy-MM-dd HH:mm:ss:SSS."""
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) + (
        f":{int(seconds * 1000) % 1000:03d}"
    )


TOOLS: dict[str, Callable[[list[str]], int]] = {
    "kafka-producer-perf-test": kafka_producer_perf_test,
    "kafka-consumer-perf-test": kafka_consumer_perf_test,
    "kafka-run-class": kafka_run_class,
    "kafka-console-producer": kafka_console_producer,
    "kafka-console-consumer": kafka_console_consumer,
    "kafka-consumer-groups": kafka_consumer_groups,
    "kafka-topics": kafka_topics,
    "kafka-reassign-partitions": kafka_reassign_partitions,
    "kafka-preferred-replica-election": kafka_preferred_replica_election,
    "kafka-configs": kafka_configs,
    "kafka-delete-records": kafka_delete_records,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in TOOLS:
        print(f"usage: kafka_tools {{{','.join(TOOLS)}}} [options]", file=sys.stderr)
        return USAGE_EXIT
    tool, options = argv[0], argv[1:]
    try:
        return TOOLS[tool](options)
    except UsageError as error:
        print(error, file=sys.stderr)
        print(f"usage: {tool}.sh: see Kafka 0.10.2's {tool}.sh --help", file=sys.stderr)
        return USAGE_EXIT


if __name__ == "__main__":
    sys.exit(main())
