"""A leader's CPU per produce request, in-process: the work every ProduceRequest costs before
replication and sockets (issue 21).

    .venv/bin/python benchmarks/produce_path.py [--requests 20000] [--rounds 5] [--against REF]

librdkafka sends one partition batch per ProduceRequest, so at the tiered-storage design's
shape (many partitions, 5 ms of linger) a broker's CPU goes mostly to requests of one small
batch each. Here one process holds a broker's request handler, replica manager and logs (20
partitions, replication factor 1) and feeds it requests as librdkafka at its defaults sends
them: three 480-byte keyed snappy records to one partition, acks=all. Each request is decoded
from its frame, started (validated, appended, given to the purgatory), finished and its response
encoded: everything but the socket and the followers. With one replica the high watermark moves
at the append, so the purgatory takes its shortest path (the request is done when it is added;
a leader with followers queues it and completes it on a later fetch): the figure is a lower
bound of a replicated leader's. Two shapes:

- 0.10.1: Produce v2 carrying a v1 snappy wrapper to a topic in message format 0.10.0;
- 2.1: Produce v7 carrying a v2 snappy batch to a topic in message format 2.1.

Each round runs in its own process (2,000 requests to warm up, then ``--requests`` timed) and
prints the CPU microseconds (time.process_time) per request; the minimum (the least disturbed by
the rest of a shared machine) and the median of ``--rounds`` rounds are reported. Beside them,
the baseline measured in the same rounds: the parts of the path each timed alone, in a loop over
one request (decoding it, encoding its answer, validating its records, appending them to a log);
the full path costs more than their sum by the Python around them and by one request's work no
longer fitting the caches. ``--against REF`` runs every round also with the code of that git
commit (a temporary worktree), alternately, and prints this tree's figures as a ratio of the
baseline's. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from common import code_at

SHAPES = {
    # release: (broker.protocol.max.version, inter.broker.protocol.version,
    #           log.message.format.version, Produce version)
    "0.10.1": ("0.10.1", "0.10.0", "0.10.0", 2),
    "2.1": ("2.1", "2.1", "2.1", 7),
}
PARTITIONS = 20
RECORDS = 3
KEY_BYTES, RECORD_BYTES = 8, 480
WARM_UP = 2000


def one_round(release: str, requests: int) -> dict[str, float]:
    """CPU microseconds per request over ``requests`` requests (after a warm-up), "path", and
    per call of each part timed alone: "decode", "encode", "validate", "append"."""
    import tempfile
    import time

    import uvloop

    from tidelog.broker.handlers import Pending, RequestHandler
    from tidelog.broker.metadata import (
        BrokerEndpoint,
        MetadataCache,
        PartitionState,
        TopicMetadata,
    )
    from tidelog.broker.metrics import Metrics
    from tidelog.broker.replica_manager import ReplicaManager
    from tidelog.clock import SystemClock
    from tidelog.config import BROKER_KEYS, parse_config
    from tidelog.log.manager import LogManager
    from tidelog.protocol.frames import Request, decode_request, encode_request, encode_response
    from tidelog.protocol.schemas import ApiKey
    from tidelog.records.format import Codec, Record, build_message_set
    from tidelog.records.record_batch import encode_batch
    from tidelog.records.validation import validate_and_assign_offsets

    protocol, inter_broker, message_format, produce_version = SHAPES[release]

    async def measure(directory: Path) -> dict[str, float]:
        clock = SystemClock()
        settings = {
            "log.dirs": str(directory),
            "broker.protocol.max.version": protocol,
            "inter.broker.protocol.version": inter_broker,
            "log.message.format.version": message_format,
        }
        logs = LogManager([directory], parse_config(settings, BROKER_KEYS), clock=clock)
        logs.startup()
        metadata = MetadataCache()
        metadata.topics["t"] = TopicMetadata(
            "t",
            {p: (1,) for p in range(PARTITIONS)},
            {p: PartitionState(1, 1, (1,)) for p in range(PARTITIONS)},
        )
        metadata.brokers[1] = BrokerEndpoint(1, "127.0.0.1", 9092)
        replicas = ReplicaManager(1, logs, metadata, clock)
        handler = RequestHandler(
            1, replicas, metadata, Metrics(), clock, auto_create_topics=False, release=protocol
        )
        replicas.apply_metadata()
        now = int(time.time() * 1000)
        records = [
            Record(b"%0*d" % (KEY_BYTES, i), b"v" * (RECORD_BYTES - KEY_BYTES), now)
            for i in range(RECORDS)
        ]
        record_set = (
            encode_batch(records, codec=Codec.SNAPPY)
            if message_format == "2.1"
            else build_message_set(records, magic=1, codec=Codec.SNAPPY)
        )
        frames = []
        for number in range(WARM_UP + requests):
            data = [{"partition": number % PARTITIONS, "record_set": record_set}]
            body = {
                "transactional_id": None,
                "acks": -1,
                "timeout": 30000,
                "topic_data": [{"topic": "t", "data": data}],
            }
            frame = encode_request(ApiKey.PRODUCE, produce_version, number, "rdkafka", body)
            frames.append(bytes(frame[4:]))

        async def answer_to(request: Request) -> dict:
            """The response body of a produce request: its first stage, then its second."""
            answer = handler.start(request)
            if isinstance(answer, Pending):
                answer = answer.finish(await answer.future)
            assert answer is not None
            return answer

        async def serve(frames: list[bytes], checked: bool) -> None:
            for frame in frames:
                request = decode_request(frame)
                answer = await answer_to(request)
                if checked:  # the warm-up: every request appended, none refused
                    errors = [
                        p["error_code"]
                        for topic in answer["responses"]
                        for p in topic["partition_responses"]
                        if p["error_code"]
                    ]
                    if errors:
                        raise RuntimeError(f"produce refused: error codes {errors}")
                encode_response(
                    request.api_key, request.api_version, request.correlation_id, answer
                )

        def alone(work: Callable[[], object]) -> float:
            """CPU microseconds of one call of ``work``, over a loop of ``requests`` calls."""
            for _ in range(WARM_UP):
                work()
            started = time.process_time()
            for _ in range(requests):
                work()
            return (time.process_time() - started) / requests * 1e6

        try:
            await serve(frames[:WARM_UP], checked=True)
            started = time.process_time()
            await serve(frames[WARM_UP:], checked=False)
            figures = {"path": (time.process_time() - started) / requests * 1e6}
            answer = await answer_to(decode_request(frames[0]))
            log = replicas.partitions[("t", 0)].log
            figures["decode"] = alone(lambda: decode_request(frames[0]))
            figures["encode"] = alone(
                lambda: encode_response(ApiKey.PRODUCE, produce_version, 0, answer)
            )
            figures["validate"] = alone(
                lambda: validate_and_assign_offsets(
                    record_set, next_offset=0, policy=log.policy, now=now
                )
            )
            figures["append"] = alone(lambda: log.append_as_leader(record_set, leader_epoch=1))
            return figures
        finally:
            logs.shutdown()

    with tempfile.TemporaryDirectory(prefix="tidelog-produce-path-") as directory:
        return uvloop.run(measure(Path(directory)))


def child_round(env: dict[str, str] | None, release: str, requests: int) -> dict[str, float]:
    """One round in a process of its own (``env``: the baseline's, or None for this tree's)."""
    command = [sys.executable, __file__, "--child", release, "--requests", str(requests)]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if output.returncode:
        raise SystemExit(f"a round failed ({' '.join(command)}):\n{output.stderr[-3000:]}")
    return {name: float(us) for name, us in json.loads(output.stdout).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--releases", default="0.10.1,2.1")
    parser.add_argument(
        "--against", metavar="REF", help="a git commit measured alternately with this tree"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_round(args.child, args.requests)))
        return
    with contextlib.ExitStack() as stack:
        codes: list[tuple[str, dict[str, str] | None]] = [("this tree", None)]
        if args.against:
            codes.append((args.against, stack.enter_context(code_at(args.against))))
        print(
            f"CPU per produce request in-process ({RECORDS} x {RECORD_BYTES}-byte keyed snappy "
            f"records to one of {PARTITIONS} partitions, acks=all, replication factor 1), "
            f"{args.requests:,} requests a round, {args.rounds} rounds"
        )
        print(
            "release | code | min us | median us | rounds (us) "
            "| alone, median us: decode, encode, validate, append"
        )
        for release in args.releases.split(","):
            rounds: dict[str, list[dict[str, float]]] = {label: [] for label, _ in codes}
            for _ in range(args.rounds):
                for label, env in codes:
                    rounds[label].append(child_round(env, release, args.requests))
            for label, _ in codes:
                path = [r["path"] for r in rounds[label]]
                parts = ", ".join(
                    f"{statistics.median(r[part] for r in rounds[label]):.1f}"
                    for part in ("decode", "encode", "validate", "append")
                )
                print(
                    f"{release} | {label} | {min(path):.1f} | {statistics.median(path):.1f} "
                    f"| {', '.join(f'{p:.1f}' for p in path)} | {parts}",
                    flush=True,
                )
            if args.against:
                mine = [r["path"] for r in rounds["this tree"]]
                theirs = [r["path"] for r in rounds[args.against]]
                print(
                    f"{release} | this tree / {args.against} | "
                    f"{min(mine) / min(theirs):.2f} | "
                    f"{statistics.median(mine) / statistics.median(theirs):.2f} |"
                )


if __name__ == "__main__":
    main()
