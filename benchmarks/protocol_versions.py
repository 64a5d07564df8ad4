"""What the versions Kafka 0.11 to 2.1 added cost the codec, per request, against the 0.10 ones.

    .venv/bin/python benchmarks/protocol_versions.py [--partitions N] [--rounds N]

For a request naming N partitions (one topic): decoding a Produce v2 and a v7 request (v7 also
passes Kafka's parse checks: one batch of magic 2 per partition), and encoding a Fetch v3 and a
v10 response (v10 has the last stable offset, log start offset and aborted transactions per
partition, and the session fields). CPU time per request (process time), with the load average
beside it. Nothing is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import os
import struct
import time

from tidelog.protocol.frames import decode_request, encode_request, encode_response
from tidelog.protocol.schemas import ApiKey


def batch() -> bytes:
    """A 100-byte record batch header and body (only the first bytes are read by the checks)."""
    head = struct.pack(">qiibIh", 0, 88, 0, 2, 0, 0)
    return head + bytes(100 - len(head))


def produce_frame(version: int, partitions: int) -> bytes:
    data = [{"partition": n, "record_set": batch()} for n in range(partitions)]
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout": 1000,
        "topic_data": [{"topic": "t", "data": data}],
    }
    return bytes(encode_request(ApiKey.PRODUCE, version, 1, "bench", body))[4:]


def fetch_body(partitions: int) -> dict:
    answers = [
        {
            "partition": n,
            "error_code": 0,
            "high_watermark": 1000,
            "last_stable_offset": 1000,
            "log_start_offset": 0,
            "aborted_transactions": None,
            "record_set": b"",
        }
        for n in range(partitions)
    ]
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": "t", "partition_responses": answers}],
    }


def cpu_per_call(call, rounds: int) -> float:
    start = time.process_time()
    for _ in range(rounds):
        call()
    return (time.process_time() - start) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"{args.partitions} partitions per request, load average {load[0]:.2f} {load[1]:.2f}")
    for version in (2, 7):
        frame = produce_frame(version, args.partitions)
        seconds = cpu_per_call(lambda frame=frame: decode_request(frame), args.rounds)
        print(f"  decode Produce v{version}: {seconds * 1e6:8.1f} us CPU")
    body = fetch_body(args.partitions)
    for version in (3, 10):
        seconds = cpu_per_call(
            lambda version=version: encode_response(ApiKey.FETCH, version, 1, body), args.rounds
        )
        print(f"  encode Fetch v{version} response: {seconds * 1e6:8.1f} us CPU")


if __name__ == "__main__":
    main()
