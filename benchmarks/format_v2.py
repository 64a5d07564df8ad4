"""Message format v1 against v2 on a leader's and a fetcher's paths, CPU per MB, in-process.

    .venv/bin/python benchmarks/format_v2.py [--records 16] [--record-bytes 1024] [--mb 64]

Also: a leader recompressing an uncompressed producer set into each compression.type codec.

- append: a producer's set of ``--records`` 1 KiB records (random payloads, a key each) checked
  and given offsets by ``validate_and_assign_offsets`` for a topic of its own format, plain and
  snappy (v1: a wrapper with relative inner offsets; v2: one batch: both are Kafka's in-place
  paths), and the whole append through ``Log.append_as_leader`` (indexes, file write);
- read: what a fetcher of Fetch v0-v3 costs when the log holds v2 batches (down-conversion to
  v1, KIP-283's cost) against a fetcher that takes the stored bytes (zero copy: here a bytes
  copy, an upper bound of what sendfile costs the broker's CPU).

CPU time of this process (time.process_time) per MB of record payload; ratios against v1 (and
against the copy for conversion) measured in the same run. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tidelog.clock import ManualClock
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.records.conversion import convert_message_set
from tidelog.records.format import Codec, Record, build_message_set
from tidelog.records.record_batch import BatchRecordInput, encode_batch
from tidelog.records.validation import RecordsPolicy, validate_and_assign_offsets

NOW = 1_700_000_000_000


def producer_set(magic: int, codec: Codec, records: int, record_bytes: int, seed: int) -> bytes:
    chooser = random.Random(seed)
    payloads = [(b"key-%d" % i, chooser.randbytes(record_bytes)) for i in range(records)]
    if magic == 2:
        return encode_batch([BatchRecordInput(k, v, NOW) for k, v in payloads], codec=codec)
    return build_message_set([Record(k, v, NOW) for k, v in payloads], magic=1, codec=codec)


def cpu_per_mb(work: Callable[[], object], payload_bytes: int, total_mb: float) -> float:
    """ms of CPU per MB of payload, over about ``total_mb`` MB of repetitions."""
    repetitions = max(1, int(total_mb * 1e6 / payload_bytes))
    start = time.process_time()
    for _ in range(repetitions):
        work()
    return (time.process_time() - start) * 1000 / (repetitions * payload_bytes / 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=16, help="records per producer batch")
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--mb", type=float, default=64, help="payload MB per measurement")
    args = parser.parse_args()
    payload = args.records * args.record_bytes
    print(f"load average {os.getloadavg()[0]:.2f}; {args.records} records of {args.record_bytes} B")
    print(f"{'path':<34}{'codec':<8}{'v1 ms/MB':>10}{'v2 ms/MB':>10}{'v2/v1':>8}")
    for codec in (Codec.NONE, Codec.SNAPPY):
        sets = {m: producer_set(m, codec, args.records, args.record_bytes, 1) for m in (1, 2)}
        validate = {
            m: cpu_per_mb(
                lambda m=m, sets=sets: validate_and_assign_offsets(
                    sets[m], next_offset=0, policy=RecordsPolicy(magic=m), now=NOW
                ),
                payload,
                args.mb,
            )
            for m in (1, 2)
        }
        row = "validate and assign offsets"
        print(f"{row:<34}{codec.name.lower():<8}{validate[1]:>10.2f}{validate[2]:>10.2f}"
              f"{validate[2] / validate[1]:>8.2f}")  # fmt: skip
        appended = {}
        with tempfile.TemporaryDirectory() as directory:
            for m in (1, 2):
                config = LogConfig(message_format_version="0.10.0" if m == 1 else "2.1")
                log = Log(Path(directory) / f"t{m}-0", config, clock=ManualClock())
                append = log.append_as_leader
                appended[m] = cpu_per_mb(
                    lambda m=m, append=append, sets=sets: append(sets[m]), payload, args.mb
                )
                log.close()
        row = "append as leader (Log)"
        print(f"{row:<34}{codec.name.lower():<8}{appended[1]:>10.2f}{appended[2]:>10.2f}"
              f"{appended[2] / appended[1]:>8.2f}")  # fmt: skip
        stored = validate_and_assign_offsets(
            sets[2], next_offset=0, policy=RecordsPolicy(magic=2), now=NOW
        ).buffer
        stored = bytes(stored) * 64  # a fetch of 64 batches
        converted = cpu_per_mb(
            lambda stored=stored: convert_message_set(stored, 1, NOW), payload * 64, args.mb
        )
        copied = cpu_per_mb(lambda stored=stored: bytes(bytearray(stored)), payload * 64, args.mb)
        row = "fetch of v2 data: copy, convert"
        print(f"{row:<34}{codec.name.lower():<8}{copied:>10.2f}{converted:>10.2f}"
              f"{converted / copied:>8.0f}  (first column: a copy; second: to v1)")  # fmt: skip

    print()
    print("compression.type: a leader recompressing an uncompressed producer set (issue 28)")
    print(
        f"{'stored codec':<14}{'v1 ms/MB':>10}{'v2 ms/MB':>10}  (against the same set kept as sent)"
    )
    plain = {m: producer_set(m, Codec.NONE, args.records, args.record_bytes, 2) for m in (1, 2)}
    kept = {
        m: cpu_per_mb(
            lambda m=m: validate_and_assign_offsets(
                plain[m], next_offset=0, policy=RecordsPolicy(magic=m), now=NOW
            ),
            payload,
            args.mb / 4,
        )
        for m in (1, 2)
    }
    print(f"{'(producer)':<14}{kept[1]:>10.2f}{kept[2]:>10.2f}")
    for codec in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD):
        costs = [
            cpu_per_mb(
                lambda m=m, codec=codec: validate_and_assign_offsets(
                    plain[m], next_offset=0, policy=RecordsPolicy(magic=m, compression=codec),
                    now=NOW,
                ),
                payload,
                args.mb / 4,
            )
            if m == 2 or codec != Codec.ZSTD
            else float("nan")
            for m in (1, 2)
        ]  # fmt: skip
        print(f"{codec.name.lower():<14}{costs[0]:>10.2f}{costs[1]:>10.2f}")


if __name__ == "__main__":
    main()
