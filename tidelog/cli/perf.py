"""``tidelog perf``: Kafka's producer and consumer perf tests, the tiered-storage design's cases,
and the search for the largest rate a cluster sustains."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from tidelog.cli.common import action_parser, fail, from_cluster


def add(commands) -> None:
    perf = commands.add_parser(
        "perf",
        help="producer and consumer performance tests",
        description="Kafka's producer and consumer perf tests, on tidelog's own asyncio client.",
    )
    actions = perf.add_subparsers(dest="action", required=True, metavar="ACTION")
    produce = action_parser(actions, "produce", "produce records and report throughput and latency")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--num-records", type=int, required=True)
    produce.add_argument("--record-size", type=int, default=1024, help="bytes (default 1024)")
    produce.add_argument("--throughput", type=float, default=-1, help="records/s cap; -1: none")
    produce.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    produce.add_argument(
        "--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"]
    )
    produce.add_argument(
        "--message-format",
        type=int,
        default=1,
        choices=[1, 2],
        help="1: v1 message sets (Produce v2); 2: v2 record batches (Produce v3, brokers of "
        "0.11.0 or later; zstd and headers need it)",
    )
    produce.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a header on every record (repeatable; --message-format 2)",
    )
    produce.add_argument(
        "--idempotent",
        action="store_true",
        help="an idempotent producer (--message-format 2): a producer id from InitProducerId "
        "and a sequence per partition on every batch",
    )
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
    produce.set_defaults(act=produce_records)
    consume = action_parser(actions, "consume", "consume records and report throughput")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--messages", type=int, required=True, help="how many records to read")
    consume.add_argument("--fetch-size", type=int, default=1024 * 1024, help="bytes per partition")
    consume.add_argument("--timeout", type=float, default=10, help="seconds without progress")
    consume.set_defaults(act=consume_records)
    for action in (produce, consume):
        where = action.add_mutually_exclusive_group(required=True)
        where.add_argument("--bootstrap-server", help="host:port[,host:port...]")
        where.add_argument("--dir", help="a local cluster's state directory")
        action.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
        action.set_defaults(run=run_client)
    _add_tiered_storage(actions)
    _add_max_rate(actions)


def run_client(args: argparse.Namespace) -> int:
    """``perf produce`` and ``perf consume`` against --bootstrap-server or the cluster in --dir;
    1 if records failed or did not arrive."""
    from tidelog.cluster.local import ClusterError
    from tidelog.errors import KafkaError

    if args.action == "produce" and (problem := _produce_options_problem(args)):
        return fail("perf produce", problem)
    try:
        bootstrap = from_cluster(
            args, args.bootstrap_server, "--bootstrap-server", lambda c: c.bootstrap_servers
        )
        result, failed = args.act(args, bootstrap)
        if args.json:
            with open(args.json, "w") as file:
                json.dump(result, file, indent=2)
        return 1 if failed else 0
    except (ClusterError, KafkaError, OSError) as error:
        return fail(f"perf {args.action}", error)


def _produce_options_problem(args: argparse.Namespace) -> str | None:
    for text in args.header:
        if not text.partition("=")[0] or "=" not in text:
            return f"--header {text!r}: expected KEY=VALUE"
    if args.message_format == 1 and (args.header or args.compression == "zstd"):
        return "--header and --compression zstd need --message-format 2 (record batches)"
    if args.message_format == 1 and getattr(args, "idempotent", False):
        return "--idempotent needs --message-format 2 (record batches)"
    return None


def _header(text: str) -> tuple[str, bytes]:
    key, _, value = text.partition("=")
    return key, value.encode()


def produce_records(args: argparse.Namespace, bootstrap: str) -> tuple[dict, bool]:
    from tidelog import gc_policy, rundata, runtime
    from tidelog.perf.producer import ProducerSettings, run_producer
    from tidelog.records.format import Codec

    headers = tuple(_header(text) for text in args.header)
    settings = ProducerSettings(
        topic=args.topic,
        num_records=args.num_records,
        record_size=args.record_size,
        throughput=args.throughput,
        acks={"all": -1, "-1": -1, "0": 0, "1": 1}[args.acks],
        codec=Codec[args.compression.upper()],
        batch_size=args.batch_size,
        linger_ms=args.linger_ms,
        message_format=args.message_format,
        headers=headers,
        idempotent=getattr(args, "idempotent", False),
    )
    run_dir = Path(args.out) if args.out else None
    started_at = rundata.now()
    gc_policy.for_measuring()
    summary, errors = runtime.run(run_producer(bootstrap, settings, run_dir=run_dir))
    print(summary.line("records sent"))
    if run_dir is not None:
        _write_produce_run(args, run_dir, settings, started_at, bootstrap, summary, errors)
    for name, count in sorted(errors.items()):
        print(f"{count} records failed: {name}")
    return {"summary": summary.as_dict(), "errors": errors}, bool(errors)


def _write_produce_run(args, run_dir, settings, started_at, bootstrap, summary, errors) -> None:
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


def consume_records(args: argparse.Namespace, bootstrap: str) -> tuple[dict, bool]:
    from tidelog import gc_policy, runtime
    from tidelog.perf.consumer import run_consumer

    gc_policy.for_measuring()
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
    failed = summary.records < args.messages
    if failed:
        print(f"only {summary.records} of {args.messages} records arrived in time")
    return {"summary": summary.as_dict()}, failed


def _add_tiered_storage(actions) -> None:
    from tidelog.perf.cases.events import CASES
    from tidelog.perf.cases.profiles import PROFILES, WORKLOADS

    command = actions.add_parser(
        "tiered-storage",
        help="the tiered-storage design's three test cases, with and without the remote tier",
        description=(
            "Starts a cluster without and one with the remote tier in use, loads history, and "
            "runs each case (normal, consumers: out-of-sync consumers read old data, rebuild: a "
            "wiped broker is rebuilt) x workload (acks=all, acks=1); writes a run directory per "
            "case x workload x tiered under --out and prints the design's table beside this "
            "run's figures."
        ),
    )
    command.add_argument("--profile", choices=sorted(PROFILES), default="small")
    command.add_argument("--out", required=True, metavar="RUN_DIR", help="where the runs go")
    command.add_argument("--duration", type=float, help="seconds of traffic per case (override)")
    command.add_argument(
        "--history-mb-per-broker", type=float, help="data loaded before the cases (override)"
    )
    command.add_argument(
        "--scale", type=float, help="a factor on the profile's rates, to fit the machine"
    )
    command.add_argument("--partitions", type=int, help="of the cases' topic (override)")
    command.add_argument("--segment-bytes", type=int, help="the topic's segment.bytes (override)")
    command.add_argument(
        "--local-retention-bytes",
        type=int,
        help="the tiered topic's local.retention.bytes, per partition (override)",
    )
    command.add_argument(
        "--rebuild-timeout",
        type=float,
        help="seconds to wait for a rebuild, and for the history to settle (override)",
    )
    command.add_argument(
        "--rebuild-throttle",
        type=_positive_rate,
        metavar="MB_PER_S",
        help=(
            "case 3 under KIP-73's replication throttle: this rate on every broker "
            "(leader.replication.throttled.rate and follower.replication.throttled.rate) for "
            "the rebuilding replicas, which are the only ones out of the ISR; default: "
            "unthrottled, as the design ran"
        ),
    )
    command.add_argument(
        "--cases", nargs="+", choices=list(CASES), default=list(CASES), help="default: all"
    )
    command.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    command.add_argument("--seed", type=int, default=0, help="of keys and payloads")
    command.add_argument(
        "--dir", help="keep the clusters' files here (default: a temporary directory, removed)"
    )
    command.set_defaults(run=run_tiered_storage)


def _positive_rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        rate = 0.0
    if not (math.isfinite(rate) and rate > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate in MB/s above 0")
    return rate


def run_tiered_storage(args: argparse.Namespace) -> int:
    from tidelog import gc_policy
    from tidelog.cluster.local import ClusterError
    from tidelog.cluster.zookeeper import ZooKeeperError
    from tidelog.errors import KafkaError
    from tidelog.perf.cases import profiles, runner, table

    overrides = (
        args.duration,
        args.history_mb_per_broker,
        args.scale,
        args.partitions,
        args.segment_bytes,
        args.local_retention_bytes,
        args.rebuild_timeout,
        args.rebuild_throttle,
    )
    profile = profiles.with_overrides(profiles.PROFILES[args.profile], *overrides)
    settings = runner.Settings(
        profile=profile,
        out=Path(args.out),
        cases=tuple(args.cases),
        workloads=tuple(args.workloads),
        seed=args.seed,
        cluster_dir=Path(args.dir).resolve() if args.dir else None,
        scaling=profiles.scaling(*overrides),
    )
    gc_policy.for_measuring()
    try:
        results = runner.run(settings, progress=lambda line: print(line, flush=True))
        table.write_table(settings, results)
    except (ClusterError, ZooKeeperError, KafkaError, OSError, RuntimeError) as error:
        print(f"tidelog perf tiered-storage: {error}", file=sys.stderr)
        return 1
    print()
    print((settings.out / "table.txt").read_text(), end="")
    print(f"\nrun data written to {settings.out}/*/; the table to {settings.out / 'table.txt'}")
    print(f"tidelog report {settings.out}/*/ --out REPORT_DIR  # the same runs through Spark")
    return 0 if all(r.acknowledged for r in results) else 1


def _add_max_rate(actions) -> None:
    from tidelog.perf.cases.profiles import WORKLOADS
    from tidelog.perf.max_rate import Settings

    defaults = Settings(workload="acks=all", out=Path("."))
    command = actions.add_parser(
        "max-rate",
        help="step a workload's offered rate up and report the largest this machine sustains",
        description=(
            "Starts a cluster, creates a topic as the tiered-storage cases do, and steps the "
            "offered produce rate of one of the design's workloads up (in-sync consumers "
            "reading everything) until a step falls short of the offered rate by more than "
            "--shortfall, fails records, leaves the consumers behind, or passes --p99-bound-ms; "
            "prints every step and the largest rate that held, per leader broker and for the "
            "cluster."
        ),
    )
    names = {name.replace("=", "_"): name for name in WORKLOADS}
    command.add_argument("--workload", required=True, choices=sorted(names))
    command.add_argument("--out", required=True, metavar="RUN_DIR", help="where the steps go")
    command.add_argument("--brokers", type=int, default=defaults.brokers)
    command.add_argument("--partitions", type=int, default=defaults.partitions)
    command.add_argument("--record-size", type=int, default=defaults.record_size)
    command.add_argument("--keys", type=int, default=defaults.keys, help="distinct keys")
    command.add_argument(
        "--in-sync-consumers", type=int, default=defaults.in_sync_consumers, help="at the log end"
    )
    command.add_argument(
        "--start-mb-per-broker",
        type=float,
        default=defaults.start_mb_per_broker,
        help="the first step's rate, MB/s per leader broker",
    )
    command.add_argument("--step-factor", type=float, default=defaults.step_factor)
    command.add_argument(
        "--refine",
        type=int,
        default=defaults.refine,
        help="bisections after the first step that fails",
    )
    command.add_argument("--max-steps", type=int, default=defaults.max_steps)
    command.add_argument("--step-seconds", type=float, default=defaults.step_seconds)
    command.add_argument(
        "--warmup-seconds",
        type=float,
        default=defaults.warmup_seconds,
        help="at the first step's rate before the search, not counted (0: none)",
    )
    command.add_argument(
        "--shortfall",
        type=float,
        default=defaults.shortfall,
        help="how far (a fraction) the achieved rate may fall short of the offered",
    )
    command.add_argument("--p99-bound-ms", type=float, default=defaults.p99_bound_ms)
    command.add_argument("--seed", type=int, default=defaults.seed)
    command.add_argument(
        "--dir", help="keep the cluster's files here (default: a temporary directory, removed)"
    )
    command.set_defaults(run=run_max_rate, workload_names=names)


def run_max_rate(args: argparse.Namespace) -> int:
    from tidelog import gc_policy
    from tidelog.cluster.local import ClusterError
    from tidelog.cluster.zookeeper import ZooKeeperError
    from tidelog.errors import KafkaError
    from tidelog.perf import max_rate

    if args.step_factor <= 1 or not 0 < args.shortfall < 1 or args.step_seconds <= 0:
        return fail(
            "perf max-rate",
            "--step-factor must be above 1, --shortfall between 0 and 1 and --step-seconds above 0",
        )
    settings = max_rate.Settings(
        workload=args.workload_names[args.workload],
        out=Path(args.out),
        brokers=args.brokers,
        partitions=args.partitions,
        record_size=args.record_size,
        keys=args.keys,
        in_sync_consumers=args.in_sync_consumers,
        start_mb_per_broker=args.start_mb_per_broker,
        step_factor=args.step_factor,
        refine=args.refine,
        max_steps=args.max_steps,
        step_seconds=args.step_seconds,
        warmup_seconds=args.warmup_seconds,
        shortfall=args.shortfall,
        p99_bound_ms=args.p99_bound_ms,
        seed=args.seed,
        cluster_dir=Path(args.dir).resolve() if args.dir else None,
    )
    gc_policy.for_measuring()
    try:
        steps = max_rate.run(settings, progress=lambda line: print(line, flush=True))
    except (ClusterError, ZooKeeperError, KafkaError, OSError, RuntimeError) as error:
        print(f"tidelog perf max-rate: {error}", file=sys.stderr)
        return 1
    print()
    print(max_rate.format_report(settings, steps))
    summary = settings.out / max_rate.SUMMARY
    print(f"\nevery step's figures: {summary}; its acknowledgements: step-NN/")
    return 0
