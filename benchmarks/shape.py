"""The tiered-storage design's workload shape through librdkafka at its defaults (issue 21).

    .venv/bin/python benchmarks/shape.py [--partitions 6,60,600] [--acks all,1]
                                         [--rates 2,8,20] [--seconds 10] [--drain 20]
                                         [--cost-rate 0.5] [--profile DIR]
                                         [--release 0.10.1|2.1] [--against REF]

3 local brokers, replication factor 3, min.insync.replicas 2; 480-byte keyed records (an 8-byte key,
a 472-byte value), snappy, from confluent-kafka (librdkafka) with its defaults (linger.ms 5),
produced at fixed offered rates (MB/s for the whole cluster) by a paced producer. For each topic
(partition count), acks and rate: the offered and delivered rate (records whose delivery report came
within the run, per second of the run), p50 / p99 latency from ``produce()`` to the delivery report
(the records still undelivered ``--drain`` seconds after the run are counted, not timed), the
brokers' CPU (utime + stime of the three broker processes from /proc, in cores) and the producer's
(this process: its Python loop and librdkafka's threads, on the same cores), the records per
ProduceRequest (those delivered within the run over the requests the leaders answered in it), and
the most requests librdkafka had sent and not yet had answered at once, over its three broker
connections (its statistics, every 500 ms): where a point's latency waits. At 600 partitions and
acks=all past what the brokers take, that was 65,000-79,000 requests, 1.1 records each: a compressed
480-byte record makes a request of about 150 bytes, the socket's send buffer (4 MB here) and a
broker's read buffer (up to 8 MB a connection) hold tens of thousands, so librdkafka's socket stays
writable and its backpressure, which would grow its batches, does not start. The producer sleeps
between bursts of the records due, at least PACING_SECONDS (1 ms) at a time, and serves librdkafka's
delivery reports between them: a latency may read up to about 1 ms long.

Then, at ``--cost-rate`` (a rate every configuration sustains), the brokers' CPU per thousand
partition batches: CPU seconds of the three brokers over the produce requests their leaders
answered (librdkafka sends one partition batch per ProduceRequest to these brokers; the
producer's own count of batches is printed beside it). At 60 and 600 partitions almost every
batch holds one record. Beside it, the followers' fetches per batch: on a quiet machine each
fetch carries about one batch (two per batch with two followers), and a busy machine makes
each fetch carry several, which lowers the cost per batch; compare figures at similar ratios.

Baseline, measured in the same run: the brokers' CPU while idle with the same topic; the
latency of one single-record request answered at a time with acks=1 and with acks=all (their
difference is one replication round trip); and each delivered rate as a ratio of its offered
rate. ``--release 2.1`` runs the brokers at Kafka 2.1's protocol
(broker.protocol.max.version and inter.broker.protocol.version) with the topics in message
format v2, so librdkafka sends record batches (Produce v7) and the followers fetch in Fetch v10
sessions; the default, 0.10.1, is tidelog's historic protocol with format v1 (librdkafka then
sends Produce v2 message sets). ``--profile DIR`` writes py-spy speedscope
profiles of every broker during the first point of each topic. ``--against REF`` brings up a
second cluster whose brokers run the code of that git commit (a temporary worktree) and runs
every point on both clusters in turn, so before/after figures come from one run on one machine
state; the CPU per batch is then also printed as a ratio. Before the points, each new topic
takes one record in every partition, timed (its first appends make the replicas' files): the
points time a topic in use. Without it, a 10 s point at 60 partitions and 20 MB/s began with
every partition's first append under full load, each broker's loop held for about half a second
in all, and its p99 read two to five times longer (160-585 ms against 56-150 that evening).
The load average is printed with each point (the machine may be shared). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from common import MB, code_at, create_topic, environment, quiet

from tidelog import gc_policy, runtime
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.processes import cpu_used_between

KEY_BYTES = 8
RECORD_BYTES = 480
CONFIG = {"min.insync.replicas": "2"}
# The paced producer sleeps at least this long between bursts of the records due. A sleep per
# record (one every 24 us at 20 MB/s) cost this process about a quarter of a core in timer
# wake-ups, on the same two cores as the brokers, and the brokers' p99 rose two- to threefold.
# librdkafka lingers 5 ms in any case, so a 1 ms burst leaves its batches as they were. Delivery
# reports are served between bursts, so a latency may read up to about a millisecond long.
PACING_SECONDS = 0.001
# --release: the brokers' broker.protocol.max.version, their inter.broker.protocol.version, and
# the topics' message.format.version
RELEASES = {"0.10.1": ("0.10.1", "0.10.0", "0.10.0"), "2.1": ("2.1", "2.1", "2.1")}


def broker_pids(cluster: LocalCluster) -> list[int]:
    assert cluster.state is not None
    return [b.pid for b in cluster.state.brokers.values() if b.pid is not None]


def answered(cluster: LocalCluster) -> tuple[int, int]:
    """ProduceRequests and fetch requests (the followers': no consumer runs here) answered by
    all brokers so far (their /metrics)."""
    produce = fetch = 0
    for broker_id in cluster.broker_ids:
        port = cluster.broker(broker_id).admin_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith('tidelog_requests_total{api="PRODUCE"}'):
                    produce += int(line.split()[-1])
                elif line.startswith(
                    ('tidelog_requests_total{api="FETCH"}', 'tidelog_requests_total{api="REPLICA')
                ):
                    fetch += int(line.split()[-1])
    return produce, fetch


def load_average() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 1)[0]


@dataclass
class Point:
    """One paced run's figures."""

    offered_mb_s: float
    delivered_mb_s: float
    p50_ms: float
    p99_ms: float
    undelivered: int
    errors: int
    brokers_cores: float
    producer_cores: float
    cpu_seconds: float
    produce_requests: int
    fetch_requests: int
    producer_batches: int
    most_in_flight: int  # librdkafka's largest count of requests sent and not yet answered
    load: str

    def records_per_request(self, seconds: float) -> float:
        """Records delivered within the run over the produce requests the leaders answered in
        it (offered records would count those of requests still unanswered at its end)."""
        delivered = self.delivered_mb_s * MB / RECORD_BYTES * seconds
        return delivered / max(self.produce_requests, 1)


def run_point(
    cluster: LocalCluster, topic: str, acks: str, rate_mb_s: float, seconds: float, drain: float
) -> Point:
    """Produces at ``rate_mb_s`` for ``seconds``; waits at most ``drain`` more for reports."""
    from confluent_kafka import Producer

    batches = most_in_flight = 0

    def count_batches(document: str) -> None:
        nonlocal batches, most_in_flight
        statistics = json.loads(document)
        # batchcnt is a window histogram, reset at each statistics report
        batches += statistics.get("topics", {}).get(topic, {}).get("batchcnt", {}).get("cnt", 0)
        in_flight = sum(
            broker["waitresp_cnt"]
            for broker in statistics.get("brokers", {}).values()
            if broker.get("nodeid", -1) >= 0  # not the bootstrap connections
        )
        most_in_flight = max(most_in_flight, in_flight)

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": acks,
            "compression.type": "snappy",
            "statistics.interval.ms": 500,
            "stats_cb": count_batches,
            "log_level": 3,
        }
    )
    records = int(rate_mb_s * MB / RECORD_BYTES * seconds)
    interval = RECORD_BYTES / (rate_mb_s * MB)
    sent_at = [0.0] * records
    latencies: list[float] = []
    errors = 0
    value = b"v" * (RECORD_BYTES - KEY_BYTES)
    clock = time.perf_counter
    in_window = 0
    window_end = 0.0

    def report(error, message) -> None:  # type: ignore[no-untyped-def]
        nonlocal errors, in_window
        now = clock()
        if error is not None:
            errors += 1
            return
        latencies.append(now - sent_at[int(message.key())])
        if now <= window_end:
            in_window += 1

    # the topic's metadata and connections, before the clock starts
    producer.produce(topic, b"warm-up", key=b"-1", on_delivery=lambda *_: None)
    producer.flush(30)
    cpu_before, (requests_before, fetches_before) = cluster.brokers_cpu(), answered(cluster)
    producer_cpu_before = time.process_time()  # the Python loop and librdkafka's threads
    start = clock()
    window_end = start + seconds
    produced = 0
    while produced < records:
        now = clock()
        due = min(records, int((now - start) / interval) + 1)
        while produced < due:
            key = b"%08d" % produced
            try:
                sent_at[produced] = clock()
                producer.produce(topic, value, key=key, on_delivery=report)
                produced += 1
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
        if produced < records:
            time.sleep(max(PACING_SECONDS, start + produced * interval - clock()))
    offered_seconds = clock() - start
    producer.poll(max(0.0, window_end - clock()))
    while clock() < window_end:
        producer.poll(window_end - clock())
    cpu = cpu_used_between(cpu_before, cluster.brokers_cpu())
    producer_cpu = time.process_time() - producer_cpu_before
    cpu_window = clock() - start
    requests, fetches = answered(cluster)
    requests, fetches = requests - requests_before, fetches - fetches_before
    deadline = clock() + drain
    while len(latencies) + errors < records and clock() < deadline:
        producer.poll(0.1)
    undelivered = records - len(latencies) - errors
    failed = errors
    producer.purge()
    producer.flush(5)
    latencies.sort()

    def percentile(fraction: float) -> float:
        if not latencies:
            return float("nan")
        return latencies[min(len(latencies) - 1, int(len(latencies) * fraction))] * 1000

    return Point(
        offered_mb_s=records * RECORD_BYTES / offered_seconds / MB,
        delivered_mb_s=in_window * RECORD_BYTES / seconds / MB,
        p50_ms=percentile(0.50),
        p99_ms=percentile(0.99),
        undelivered=undelivered,
        errors=failed,
        brokers_cores=cpu / cpu_window,
        producer_cores=producer_cpu / cpu_window,
        cpu_seconds=cpu,
        produce_requests=requests,
        fetch_requests=fetches,
        producer_batches=batches,
        most_in_flight=most_in_flight,
        load=load_average(),
    )


def first_records(cluster: LocalCluster, topic: str) -> float:
    """Seconds from producing one record (acks=all) to every partition of a topic just made to
    the last delivery report: each partition's first append makes its replicas' index files
    and writes their leader epoch, on every broker, once in the partition's life. The points
    run after it, so they time a topic in use, not one being set up."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    partitions = producer.list_topics(topic, timeout=30).topics[topic].partitions
    if not partitions:
        raise RuntimeError(f"{topic}: no partitions in the metadata")
    failed: list = []
    started = time.perf_counter()
    for partition in partitions:
        producer.produce(
            topic,
            b"first",
            key=b"-1",
            partition=partition,
            on_delivery=lambda error, _: error is None or failed.append(error),
        )
    if producer.flush(60) or failed:
        raise RuntimeError(f"{topic}: first records not delivered: {failed[:3]}")
    return time.perf_counter() - started


async def round_trips(cluster: LocalCluster, topic: str, count: int) -> dict[int, float]:
    """Median seconds of one single-record produce request answered at a time (tidelog's own
    connection, to the leader of partition 0), for acks=1 and acks=all: their difference is
    the replication round trip (the followers woken, their fetch and append, the next fetch
    moving the high watermark, the produce completed)."""
    from tidelog.protocol.client import Client
    from tidelog.protocol.schemas import ApiKey
    from tidelog.records.format import Record, build_message_set

    client = Client(cluster.bootstrap_servers)
    leaders = await client.partitions(topic)
    connection = await client.connection(leaders[0].leader)
    medians = {}
    for acks in (1, -1):
        seconds = []
        for number in range(count):
            # the time now: a CreateTime of 0 is older than segment.ms, so each append would
            # roll a new segment (as in Kafka) and this would time the rolls
            now = int(time.time() * 1000)
            records = build_message_set(
                [Record(b"%08d" % number, b"v" * (RECORD_BYTES - KEY_BYTES), now)], magic=1
            )
            body = {
                "acks": acks,
                "timeout": 30000,
                "topic_data": [{"topic": topic, "data": [{"partition": 0, "record_set": records}]}],
            }
            started = time.perf_counter()
            await connection.request(ApiKey.PRODUCE, 2, body)
            seconds.append(time.perf_counter() - started)
        medians[acks] = sorted(seconds)[count // 2]
    await client.close()
    return medians


def profile_brokers(cluster: LocalCluster, directory: Path, name: str, seconds: float) -> list:
    """Starts py-spy on every broker for ``seconds``; the processes to wait for."""
    directory.mkdir(parents=True, exist_ok=True)
    py_spy = str(Path(sys.executable).parent / "py-spy")
    processes = []
    for broker_id, pid in zip(cluster.broker_ids, broker_pids(cluster), strict=True):
        out = directory / f"{name}-broker{broker_id}.speedscope.json"
        command = [py_spy, "record", "-p", str(pid), "-d", str(int(seconds)), "-f", "speedscope"]
        processes.append(
            subprocess.Popen(
                [*command, "-o", str(out), "--nonblocking"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    return processes


def idle_cores(cluster: LocalCluster, seconds: float) -> float:
    before = cluster.brokers_cpu()
    time.sleep(seconds)  # the measurement itself: CPU used over this window
    return cpu_used_between(before, cluster.brokers_cpu()) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="6,60,600", help="topics' partition counts")
    parser.add_argument("--acks", default="all,1")
    parser.add_argument("--rates", default="2,8,20", help="offered MB/s for the cluster ('': none)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each point")
    parser.add_argument("--drain", type=float, default=20.0, help="wait for late reports")
    parser.add_argument(
        "--cost-rate", type=float, default=0.5, help="MB/s of the CPU cost (0: none)"
    )
    parser.add_argument("--profile", type=Path, help="py-spy profiles of the brokers here")
    parser.add_argument(
        "--release",
        default="0.10.1",
        choices=RELEASES,
        help="the brokers' protocol release and the topics' message format",
    )
    parser.add_argument(
        "--against",
        metavar="REF",
        help="a git commit whose brokers run the same points, alternately with this tree's",
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.partitions.split(",")]
    acks_list = args.acks.split(",")
    rates = [float(r) for r in args.rates.split(",") if r]

    os.sync()  # the previous benchmark's writeback is not this one's
    with contextlib.ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tidelog-shape-")))
        overrides = {
            "log.segment.bytes": str(256 * 1024 * 1024),
            "broker.protocol.max.version": RELEASES[args.release][0],
            "inter.broker.protocol.version": RELEASES[args.release][1],
        }
        # each code's own cluster, all up at once (an idle one costs about 0.02 cores), and
        # every point run on each in turn, so a change in the machine's load falls on both
        codes: list[tuple[str, LocalCluster]] = []
        trees: list[tuple[str, dict[str, str] | None]] = [("this tree", None)]
        if args.against:
            trees.append((args.against, stack.enter_context(code_at(args.against))))
        for label, env in trees:
            cluster = LocalCluster(directory / f"cluster-{len(codes)}")
            with environment(env):
                cluster.up(3, progress=quiet, overrides=overrides)
            stack.callback(cluster.down, progress=quiet)
            codes.append((label, cluster))
        import confluent_kafka  # noqa: F401 (loaded before the freeze)

        gc_policy.for_measuring()  # this process's own pauses are not the brokers' latency
        print(
            f"{RECORD_BYTES}-byte keyed snappy records, librdkafka defaults, 3 brokers, "
            f"RF 3, min.insync.replicas 2, {args.seconds:g} s per point, brokers at "
            f"{args.release}, message format {RELEASES[args.release][2]}"
        )
        print(
            "code | topic | acks | offered MB/s | delivered MB/s (of offered) | p50 / p99 ms "
            "| undelivered | brokers' cores (idle) | producer's cores | records per request "
            "| most requests in flight | load"
        )
        costs = []
        for count in counts:
            topic = f"shape-{count}"
            config = {**CONFIG, "message.format.version": RELEASES[args.release][2]}
            idle = {}
            for label, cluster in codes:
                create_topic(cluster, topic, count, 3, config)
                first = first_records(cluster, topic)
                idle[label] = idle_cores(cluster, 3.0)
                trips = runtime.run(round_trips(cluster, topic, 500))
                print(
                    f"{label} | {count} partitions: first record of each acknowledged in "
                    f"{first * 1000:,.0f} ms; one request at a time, median acks=1 "
                    f"{trips[1] * 1000:.2f} ms, acks=all {trips[-1] * 1000:.2f} ms "
                    f"(replication round trip {(trips[-1] - trips[1]) * 1000:.2f} ms) "
                    f"| {load_average()}",
                    flush=True,
                )
            profiled = False
            for acks in acks_list:
                for rate in rates:
                    for label, cluster in codes:
                        spies = []
                        if args.profile and not profiled:
                            spies = profile_brokers(
                                cluster,
                                args.profile,
                                f"{count}p-acks{acks}-{rate:g}MBs",
                                args.seconds,
                            )
                            profiled = True
                        point = run_point(cluster, topic, acks, rate, args.seconds, args.drain)
                        for spy in spies:
                            spy.wait(timeout=args.seconds + 60)
                        print(
                            f"{label} | {count} partitions | {acks} | "
                            f"{point.offered_mb_s:.1f} | {point.delivered_mb_s:.1f} "
                            f"({point.delivered_mb_s / point.offered_mb_s:.2f}) | "
                            f"{point.p50_ms:,.1f} / {point.p99_ms:,.1f} | "
                            f"{point.undelivered:,}"
                            + (f" ({point.errors:,} errors)" if point.errors else "")
                            + f" | {point.brokers_cores:.2f} ({idle[label]:.2f}) "
                            f"| {point.producer_cores:.2f} "
                            f"| {point.records_per_request(args.seconds):.2f} "
                            f"| {point.most_in_flight:,} | {point.load}",
                            flush=True,
                        )
            for acks in acks_list if args.cost_rate else []:
                for label, cluster in codes:
                    point = run_point(
                        cluster, topic, acks, args.cost_rate, args.seconds, args.drain
                    )
                    costs.append((label, count, acks, point, idle[label]))
        print(f"brokers' CPU per thousand partition batches at {args.cost_rate:g} MB/s:")
        print(
            "code | topic | acks | produce requests (producer's batches) | records per batch "
            "| follower fetches per batch | delivered MB/s | p99 ms "
            "| CPU ms per 1000 batches (idle share) | load"
        )
        per_batch = {}
        for label, count, acks, point, idle_cpu in costs:
            requests = max(point.produce_requests, 1)
            idle_share = idle_cpu * args.seconds / point.cpu_seconds if point.cpu_seconds else 0
            per_batch[label, count, acks] = point.cpu_seconds * 1e6 / requests
            print(
                f"{label} | {count} partitions | {acks} | {point.produce_requests:,} "
                f"({point.producer_batches:,}) | {point.records_per_request(args.seconds):.2f} | "
                f"{point.fetch_requests / requests:.2f} | {point.delivered_mb_s:.2f} | "
                f"{point.p99_ms:,.1f} | "
                f"{per_batch[label, count, acks]:,.1f} ({idle_share:.2f}) | {point.load}",
                flush=True,
            )
        if args.against:
            for count in counts:
                for acks in acks_list if args.cost_rate else []:
                    ratio = (
                        per_batch["this tree", count, acks] / per_batch[args.against, count, acks]
                    )
                    print(
                        f"CPU per batch, this tree / {args.against}: {count} partitions, "
                        f"acks={acks}: {ratio:.2f}"
                    )


if __name__ == "__main__":
    main()
