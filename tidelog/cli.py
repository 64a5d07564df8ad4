"""The ``tidelog`` command."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tidelog import __version__

if TYPE_CHECKING:
    from tidelog.cluster.compose import ComposeCluster


def _dump_log(args: argparse.Namespace) -> int:
    from tidelog.log.dump import dump_file, format_dump
    from tidelog.tiered import dump as remote_dump

    failed = False
    dumps = []
    for name in args.files:
        remote = remote_dump.is_remote_index(Path(name))
        try:
            if remote:
                dump = remote_dump.dump_remote_index(Path(name), verify=args.verify_index)
            else:
                dump = dump_file(
                    Path(name),
                    deep_iteration=args.deep_iteration,
                    print_data=args.print_data_log,
                    verify=args.verify_index,
                )
        except (OSError, ValueError) as error:
            print(f"tidelog dump-log: {error}", file=sys.stderr)
            failed = True
            continue
        failed = failed or bool(dump.get("mismatches")) or bool(dump.get("invalid_bytes"))
        if args.json:
            dumps.append(dump)
        else:
            print("\n".join((remote_dump.format_dump if remote else format_dump)(dump)))
    if args.json:
        print(json.dumps(dumps if len(dumps) != 1 else dumps[0], indent=2))
    return 1 if failed else 0


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


def _fail(command: str, error: Exception | str) -> int:
    print(f"tidelog {command}: {error}", file=sys.stderr)
    return 2


def _broker(args: argparse.Namespace) -> int:
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
        return _fail("broker", "--config is required (a server.properties file)")
    try:
        raw = read_properties(args.config)
        raw.update(_key_values(args.override, "--override"))
        config = broker_config(raw)
    except (ConfigError, OSError) as error:
        return _fail("broker", error)
    note = not_applicable_note(raw)
    if note:
        logging.getLogger("tidelog.config").info("%s", note)
    runtime.run(BrokerNode(config).run_until_signalled())
    return 0


def _key_values(pairs: list[str] | None, option: str) -> dict[str, str]:
    from tidelog.config import ConfigError

    values = {}
    for pair in pairs or []:
        key, separator, value = pair.partition("=")
        if not separator:
            raise ConfigError(f"{option} {pair!r}: expected key=value")
        values[key.strip()] = value.strip()
    return values


def _cluster(args: argparse.Namespace) -> int:
    import signal

    from tidelog.cluster.local import ClusterError, LocalCluster
    from tidelog.cluster.zookeeper import ZooKeeperError
    from tidelog.config import ConfigError

    cluster = LocalCluster(args.dir)
    try:
        if args.action == "up":
            cluster.up(
                args.brokers,
                zookeeper=args.zookeeper,
                overrides=_key_values(args.override, "--override"),
                base_port=args.base_port,
            )
            print(f"bootstrap servers: {cluster.bootstrap_servers}")
            print(f"zookeeper: {cluster.zookeeper}")
        elif args.action == "status":
            rows = cluster.status()
            print(f"bootstrap servers: {cluster.bootstrap_servers}")
            zookeeper_state = "running" if cluster.zookeeper_alive else "not running"
            if cluster.state and cluster.state.zookeeper_process is None:
                zookeeper_state = "external"
            print(f"zookeeper: {cluster.zookeeper} ({zookeeper_state})")
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
        elif args.action == "down":
            cluster.down()
        elif args.action == "start":
            cluster.start_broker(args.broker_id)
            print(
                f"broker {args.broker_id} started (pid {cluster.broker(args.broker_id).pid}) "
                f"and registered; listening on 127.0.0.1:{cluster.broker(args.broker_id).port}"
            )
        elif args.action == "restart":
            cluster.restart_broker(args.broker_id, _key_values(args.override, "--override"))
            print(
                f"broker {args.broker_id} restarted (pid {cluster.broker(args.broker_id).pid}) "
                f"and registered; its settings: {cluster.broker(args.broker_id).config}"
            )
        elif args.action == "stop":
            cluster.stop_broker(args.broker_id)
            print(f"broker {args.broker_id} stopped cleanly (SIGTERM)")
        elif args.action == "kill":
            cluster.signal_broker(args.broker_id, signal.Signals[f"SIG{args.signal}"])
            print(f"broker {args.broker_id} sent SIG{args.signal}")
    except (ClusterError, ZooKeeperError, ConfigError) as error:
        return _fail(f"cluster {args.action}", error)
    return 0


def _from_cluster(args: argparse.Namespace, given: str | None, option: str, pick) -> str:
    """An address given on the command line, or read from the local cluster in --dir."""
    from tidelog.cluster.local import ClusterError, LocalCluster

    if given:
        return given
    cluster = LocalCluster(args.dir)
    if cluster.state is None:
        raise ClusterError(f"no cluster in {args.dir}; give {option} or --dir DIR")
    return pick(cluster)


def _topic(args: argparse.Namespace) -> int:
    from tidelog.cluster.local import ClusterError
    from tidelog.config import ConfigError
    from tidelog.controller import topics, zookeeper
    from tidelog.errors import KafkaError

    try:
        client = zookeeper.connect(
            _from_cluster(args, args.zookeeper, "--zookeeper host:port", lambda c: c.zookeeper)
        )
    except (ClusterError, OSError) as error:
        return _fail(f"topic {args.action}", error)
    try:
        if args.action == "create":
            assignment = topics.create_topic(
                client,
                args.topic,
                args.partitions,
                args.replication_factor,
                _key_values(args.config, "--config"),
            )
            print(
                f"created topic {args.topic}: "
                + ", ".join(
                    f"partition {p} on {replicas}" for p, replicas in sorted(assignment.items())
                )
            )
        elif args.action == "list":
            for name in sorted(client.get_children(zookeeper.TOPICS)):
                print(name)
        elif args.action == "describe":
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
        elif args.action == "delete":
            try:
                zookeeper.request_topic_deletion(client, args.topic)
            except KeyError:
                raise _no_topic(args.topic) from None
            print(f"asked the controller to delete topic {args.topic}")
        elif args.action == "preferred-leader-election":
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
        elif args.action == "alter-config":
            changes: dict[str, str | None] = dict(_key_values(args.add_config, "--add-config"))
            changes.update({key: None for key in args.delete_config or []})
            now = topics.alter_topic_config(client, args.topic, changes)
            print(
                f"topic {args.topic} overrides: "
                + (", ".join(f"{k}={v}" for k, v in sorted(now.items())) or "none")
            )
    except (KafkaError, ConfigError, RuntimeError) as error:
        return _fail(f"topic {args.action}", error)
    finally:
        client.stop()
        client.close()
    return 0


def _no_topic(name: str) -> Exception:
    from tidelog.errors import ErrorCode, KafkaError

    return KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")


def _perf(args: argparse.Namespace) -> int:
    from tidelog import runtime
    from tidelog.cluster.local import ClusterError
    from tidelog.errors import KafkaError
    from tidelog.records.format import Codec

    try:
        bootstrap = _from_cluster(
            args, args.bootstrap_server, "--bootstrap-server", lambda c: c.bootstrap_servers
        )
        if args.action == "produce":
            from tidelog.perf.producer import ProducerSettings, run_producer

            settings = ProducerSettings(
                topic=args.topic,
                num_records=args.num_records,
                record_size=args.record_size,
                throughput=args.throughput,
                acks={"all": -1, "-1": -1, "0": 0, "1": 1}[args.acks],
                codec=Codec[args.compression.upper()],
                batch_size=args.batch_size,
                linger_ms=args.linger_ms,
            )
            run_dir = Path(args.out) if args.out else None
            started_at = _run_started()
            summary, errors = runtime.run(run_producer(bootstrap, settings, run_dir=run_dir))
            print(summary.line("records sent"))
            if run_dir is not None:
                _write_perf_run(args, run_dir, settings, started_at, bootstrap, summary, errors)
            for name, count in sorted(errors.items()):
                print(f"{count} records failed: {name}")
            result = {"summary": summary.as_dict(), "errors": errors}
            failed = bool(errors)
        else:
            from tidelog.perf.consumer import run_consumer

            summary = runtime.run(
                run_consumer(
                    bootstrap,
                    args.topic,
                    args.messages,
                    fetch_size=args.fetch_size,
                    timeout=args.timeout,
                )
            )
            print(summary.line("records consumed").replace("latency", "fetch latency", 2))
            result = {"summary": summary.as_dict()}
            failed = summary.records < args.messages
            if failed:
                print(f"only {summary.records} of {args.messages} records arrived in time")
        if args.json:
            import json

            with open(args.json, "w") as file:
                json.dump(result, file, indent=2)
        return 1 if failed else 0
    except (ClusterError, KafkaError, OSError) as error:
        return _fail(f"perf {args.action}", error)


def _run_started() -> str:
    from tidelog import rundata

    return rundata.now()


def _write_perf_run(args, run_dir, settings, started_at, bootstrap, summary, errors) -> None:
    """metadata.json of a ``perf produce --out`` run (the producer wrote acks.parquet)."""
    from dataclasses import asdict

    from tidelog import rundata

    metadata = rundata.RunMetadata(
        kind="perf-produce",
        case=args.case,
        workload=rundata.WORKLOADS[settings.acks],
        tiered=args.tiered,
        started_at=started_at,
        ended_at=rundata.now(),
        settings=asdict(settings) | {"codec": settings.codec.name.lower()},
        profile={"bootstrap_servers": bootstrap, "cluster_dir": args.dir},
        verdict={"summary": summary.as_dict(), "errors": errors},
    )
    rundata.write_metadata(run_dir, metadata)
    print(f"run data written to {run_dir}")


def _scenario(args: argparse.Namespace) -> int:
    import json
    import shutil
    import tempfile

    from tidelog import runtime
    from tidelog.cluster.local import ClusterError, LocalCluster
    from tidelog.cluster.scenario import (
        FAILURE_BROKER_OVERRIDES,
        SCENARIO_OVERRIDES,
        ScenarioSettings,
        run_scenario,
    )
    from tidelog.cluster.zookeeper import ZooKeeperError

    if args.failure == "truncation_failover" and args.target != "leader":
        return _fail("scenario replication", "truncation_failover: --target must be leader")
    settings = ScenarioSettings(
        failure=args.failure,
        target=args.target,
        message_format=args.format,
        acks=-1 if args.acks == "all" else int(args.acks),
        cycles=args.cycles,
        rate=args.rate,
    )
    directory = args.dir or tempfile.mkdtemp(prefix="tidelog-scenario-")
    overrides = {
        **SCENARIO_OVERRIDES,
        **FAILURE_BROKER_OVERRIDES.get(args.failure, {}),
        "replica.truncation.mode": args.truncation_mode,
    }
    cluster = _compose_cluster(args, directory) if args.compose else LocalCluster(directory)
    started_here = not cluster.running
    try:
        if started_here:
            print(f"starting {args.brokers} brokers in {directory}")
            cluster.up(args.brokers, overrides=overrides, progress=lambda _: None)
        run_dir = Path(args.out) if args.out else None
        topic, report = runtime.run(run_scenario(cluster, settings, run_dir=run_dir))
    except (ClusterError, ZooKeeperError) as error:
        return _fail("scenario replication", f"{error}\n(the cluster's files are in {directory})")
    finally:
        if started_here and cluster.state is not None:
            cluster.down(progress=lambda _: None)
    print()
    print(
        f"scenario: {args.failure} of the {args.target}, format {args.format}, acks={args.acks}, "
        f"{args.cycles} cycle(s), topic {topic}"
    )
    print(report.table())
    if args.out:
        print(f"run data written to {args.out}")
    if args.report:
        document = {"settings": vars(settings), "topic": topic, "report": report.as_dict()}
        with open(args.report, "w") as file:
            json.dump(document, file, indent=2)
        print(f"report written to {args.report}")
    print("verdict: " + ("PASS" if report.ok else "FAIL"))
    if args.dir is None:  # a cluster of its own, in a temporary directory
        if report.ok:
            shutil.rmtree(directory, ignore_errors=True)
        else:
            print(f"the cluster's logs and data are kept in {directory}")
    return 0 if report.ok else 1


def _compose_cluster(args: argparse.Namespace, directory: str) -> ComposeCluster:
    """--compose: a compose project of its own (free 127.0.0.1 ports), faults through the engine."""
    from tidelog.cluster.compose import ComposeCluster

    return ComposeCluster.create(
        directory, args.compose_file, project=f"tidelog-scenario-{os.getpid()}"
    )


class _SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser: an argument it does not know is reported with its own usage
    (argparse would hand it up to the top level, whose usage says nothing about the option)."""

    def parse_known_args(self, args=None, namespace=None):
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def _report(args: argparse.Namespace) -> int:
    try:
        from tidelog.pipeline.render import write_report
        from tidelog.pipeline.report import compute, load_runs
        from tidelog.pipeline.session import local_session
    except ImportError as error:
        return _fail(
            "report", f"{error}; install the pipeline extra: pip install 'tidelog[pipeline]'"
        )
    try:
        runs = load_runs(args.run_dirs)
    except (OSError, ValueError, TypeError) as error:
        return _fail("report", error)
    spark = local_session(cores=args.cores, app_name="tidelog-report")
    try:
        data = compute(spark, runs, window_seconds=args.window_seconds)
    finally:
        spark.stop()
    written = write_report(data, args.out)
    print(f"report of {len(runs)} run(s) written to {args.out}: {len(written)} files")
    print(f"open {Path(args.out) / 'report.html'}")
    return 0


def _command(actions, name: str, text: str) -> argparse.ArgumentParser:
    """A subcommand whose --help opens with what it does (its one-line help, as a sentence)."""
    return actions.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")


def build_parser(only_broker: bool = False) -> argparse.ArgumentParser:
    """tidelog's command line; ``only_broker``: just the broker command (a broker's start does
    not pay for the imports of the other commands' choices)."""
    parser = argparse.ArgumentParser(
        prog="tidelog",
        description="A replicated, Kafka-compatible log broker and cluster testbed.",
    )
    parser.add_argument("--version", action="version", version=f"tidelog {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_SubcommandParser
    )

    dump = commands.add_parser(
        "dump-log",
        help=(
            "print the messages of .log files or the entries of .index/.timeindex files and "
            "of the remote indexes (.remoteLogIndex/.remoteOffsetIndex/.remoteTimeIndex)"
        ),
        description=(
            "Like Kafka's DumpLogSegments: prints each message of a .log segment (offset, "
            "position, magic, codec, timestamp, key and value sizes, CRC validity) or each "
            "entry of an index. Exits 1 if a log has invalid bytes or an index a mismatch."
        ),
    )
    dump.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help=".log, .index, .timeindex, .remoteLogIndex, .remoteOffsetIndex or .remoteTimeIndex",
    )
    dump.add_argument(
        "--deep-iteration", action="store_true", help="also print the messages inside wrappers"
    )
    dump.add_argument(
        "--print-data-log", action="store_true", help="print keys and values as text too"
    )
    dump.add_argument(
        "--verify-index",
        action="store_true",
        help=(
            "check every index entry against the .log file beside it (a remote index: CRCs, "
            "and the messages in the remote data) and report mismatches"
        ),
    )
    dump.add_argument("--json", action="store_true", help="machine-readable output")
    dump.set_defaults(run=_dump_log)

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
    broker.set_defaults(run=_broker)
    if only_broker:
        return parser

    cluster = commands.add_parser(
        "cluster",
        help="start, inspect and stop a local cluster",
        description="A local cluster: an embedded ZooKeeper and N brokers on 127.0.0.1.",
    )
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = _command(actions, "up", "start ZooKeeper (unless given) and N brokers")
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
    for name, text in [
        ("status", "show each broker: process, registration, ports"),
        ("down", "stop every broker, then ZooKeeper"),
    ]:
        _command(actions, name, text)
    for name, text in [
        ("start", "start a stopped broker"),
        ("stop", "stop a broker cleanly (SIGTERM)"),
        ("kill", "send a broker a signal (default KILL)"),
        ("restart", "stop a broker cleanly and start it again, with changed settings"),
    ]:
        action = _command(actions, name, text)
        action.add_argument("broker_id", type=int, metavar="BROKER_ID")
        if name == "restart":
            action.add_argument(
                "--override",
                action="append",
                metavar="KEY=VALUE",
                help="a setting written into the broker's server.properties",
            )
        if name == "kill":
            action.add_argument(
                "--signal", default="KILL", choices=["TERM", "KILL", "STOP", "CONT"]
            )
    for action in actions.choices.values():
        action.add_argument("--dir", required=True, help="the cluster's state directory")
    cluster.set_defaults(run=_cluster)

    topic = commands.add_parser(
        "topic",
        help="create, list, describe and configure topics",
        description="Topics in ZooKeeper.",
    )
    topic_actions = topic.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = _command(topic_actions, "create", "create a topic")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic setting")
    _command(topic_actions, "list", "list topics")
    describe = _command(topic_actions, "describe", "partitions, leaders, replicas, ISR")
    describe.add_argument("--topic")
    delete = _command(topic_actions, "delete", "delete a topic and its data")
    delete.add_argument("--topic", required=True)
    preferred = _command(
        topic_actions,
        "preferred-leader-election",
        "move leadership back to each partition's first replica",
    )
    preferred.add_argument("--topic", help="only this topic (default: every topic)")
    alter = _command(topic_actions, "alter-config", "set or remove topic settings")
    alter.add_argument("--topic", required=True)
    alter.add_argument("--add-config", action="append", metavar="KEY=VALUE")
    alter.add_argument("--delete-config", action="append", metavar="KEY")
    for action in topic_actions.choices.values():
        where = action.add_mutually_exclusive_group(required=True)
        where.add_argument("--zookeeper", help="ZooKeeper host:port")
        where.add_argument("--dir", help="a local cluster's state directory")
    topic.set_defaults(run=_topic)

    perf = commands.add_parser(
        "perf",
        help="producer and consumer performance tests",
        description="Kafka's producer and consumer perf tests, on tidelog's own asyncio client.",
    )
    perf_actions = perf.add_subparsers(dest="action", required=True, metavar="ACTION")
    produce = _command(perf_actions, "produce", "produce records and report throughput and latency")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--num-records", type=int, required=True)
    produce.add_argument("--record-size", type=int, default=1024, help="bytes (default 1024)")
    produce.add_argument("--throughput", type=float, default=-1, help="records/s cap; -1: none")
    produce.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    produce.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4"])
    produce.add_argument("--batch-size", type=int, default=16384, help="bytes per batch")
    produce.add_argument("--linger-ms", type=float, default=0)
    produce.add_argument(
        "--out", metavar="RUN_DIR", help="write a run directory (acks.parquet, metadata.json)"
    )
    produce.add_argument(
        "--case",
        default="normal",
        help="the test case the run stands for, in its metadata (normal, consumers, rebuild)",
    )
    produce.add_argument(
        "--tiered", action="store_true", help="record that the topic keeps a remote tier"
    )
    consume = _command(perf_actions, "consume", "consume records and report throughput")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--messages", type=int, required=True, help="how many records to read")
    consume.add_argument("--fetch-size", type=int, default=1024 * 1024, help="bytes per partition")
    consume.add_argument("--timeout", type=float, default=10, help="seconds without progress")
    for action in perf_actions.choices.values():
        where = action.add_mutually_exclusive_group(required=True)
        where.add_argument("--bootstrap-server", help="host:port[,host:port...]")
        where.add_argument("--dir", help="a local cluster's state directory")
        action.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    perf.set_defaults(run=_perf)
    from tidelog.perf.cases import add_command as add_tiered_storage_cases

    add_tiered_storage_cases(perf_actions)
    from tidelog.perf.max_rate import add_command as add_max_rate

    add_max_rate(perf_actions)

    from tidelog.cluster.faults import FAILURES, TARGETS

    scenario = commands.add_parser(
        "scenario",
        help="chaos scenarios with a delivery check",
        description="Break a cluster on purpose while producing, then check every message.",
    )
    kinds = scenario.add_subparsers(dest="kind", required=True, metavar="KIND")
    replication = kinds.add_parser(
        "replication",
        help="faults on the leader, a follower or the controller while producing",
        description=(
            "Produces at a steady rate to a topic with replication factor 3 and "
            "min.insync.replicas 2, injects the failure CYCLES times (waiting for recovery each "
            "time), then consumes everything and checks: acknowledged but lost, duplicates, "
            "order, divergence between replicas, time indexes, LogAppendTime order. Exits 1 on "
            "any violation."
        ),
    )
    replication.add_argument(
        "--brokers", type=int, default=3, help="brokers of a cluster this command starts"
    )
    replication.add_argument(
        "--failure",
        required=True,
        choices=FAILURES,
        help=(
            "truncation_failover stops a leader while its next-in-line follower is paused, so "
            "that the third replica truncates and then leads (KIP-101); it picks its own "
            "brokers, so --target must be leader; wipe_and_rebuild kills a broker, deletes its "
            "log dirs and starts it again, on a cluster with tiered storage"
        ),
    )
    replication.add_argument(
        "--target",
        default="leader",
        choices=TARGETS,
        help="the broker hit: partition 0's leader, one of its followers, or the controller",
    )
    replication.add_argument(
        "--truncation-mode",
        default="leader-epoch",
        choices=["leader-epoch", "high-watermark"],
        help=(
            "replica.truncation.mode of a cluster this command starts: high-watermark "
            "truncates as Kafka 0.10 did, and can lose acknowledged messages"
        ),
    )
    replication.add_argument(
        "--format",
        default="0.10.0",
        choices=["0.9.0", "0.10.0"],
        help="the topic's message.format.version (0.9.0: v0 messages, 0.10.0: v1)",
    )
    replication.add_argument("--acks", default="all", choices=["1", "all"])
    replication.add_argument(
        "--cycles", type=int, default=1, help="how many times the failure is injected"
    )
    replication.add_argument("--rate", type=float, default=200, help="messages per second")
    replication.add_argument("--dir", help="use (or start) the cluster in this directory")
    replication.add_argument(
        "--compose",
        action="store_true",
        help=(
            "run on a compose cluster of its own (three brokers from --compose-file, removed "
            "afterwards), faults injected through the engine: docker kill -s KILL, docker "
            "pause, docker stop/start, and network_partition (docker network disconnect)"
        ),
    )
    replication.add_argument(
        "--compose-file", default="compose.yaml", help="with --compose (default: ./compose.yaml)"
    )
    replication.add_argument("--report", metavar="FILE", help="write the report as JSON")
    replication.add_argument(
        "--out",
        metavar="RUN_DIR",
        help="write a run directory: acknowledgements, faults, what was consumed, the verdict",
    )
    scenario.set_defaults(run=_scenario)
    from tidelog.upgrade.command import add_commands as add_upgrade_commands
    from tidelog.upgrade.command import add_scenario as add_upgrade_scenario

    add_upgrade_commands(commands)
    add_upgrade_scenario(kinds)

    report = commands.add_parser(
        "report",
        help="tables, plots and an HTML page from run directories (Spark)",
        description=(
            "Reads the run directories that perf, scenario and load runs write (--out), "
            "computes exact latency percentiles, average and max windowed p99, throughput, "
            "delivery per partition, consumer lag and rebuild durations with Spark in local "
            "mode, and writes CSV "
            "and Markdown tables, PNG plots and one self-contained report.html. Two runs or more "
            "are compared side by side."
        ),
    )
    report.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="run directories, or directories of them (one run of several cases)",
    )
    report.add_argument("--out", required=True, metavar="REPORT_DIR", help="where to write")
    report.add_argument(
        "--window-seconds",
        type=float,
        default=1.0,
        help="the window of 'average p99' (p99 per window, averaged); default 1",
    )
    report.add_argument("--cores", type=int, default=2, help="Spark local cores (default 2)")
    report.set_defaults(run=_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    args = build_parser(only_broker=given[:1] == ["broker"]).parse_args(given)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        return args.run(args)
    except BrokenPipeError:
        # The reader went away (`tidelog dump-log ... | head`): stop quietly, as Unix tools do.
        # Python flushes stdout again at exit, so it is pointed at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a process ended by SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
