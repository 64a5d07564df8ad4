"""Open files of a real broker process follow the segments being written: a rolled segment
keeps only its log file open (its indexes are searched from memory), and an active segment's
indexes close their files once nobody writes them."""

from __future__ import annotations

import os

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tidelog.cluster.local import LocalCluster, wait_until

PARTITIONS = 20
RECORDS = 100  # per partition: about six 4 KiB segments each, an index entry every 256 B


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def segments_on_disk(cluster: LocalCluster, broker_id: int, topic: str) -> int:
    log_dirs = cluster.broker_settings(broker_id)["log.dirs"].split(",")
    return sum(
        1
        for log_dir in log_dirs
        for partition in range(PARTITIONS)
        if os.path.isdir(os.path.join(log_dir, f"{topic}-{partition}"))
        for name in os.listdir(os.path.join(log_dir, f"{topic}-{partition}"))
        if name.endswith(".log")
    )


def test_open_files_grow_with_active_segments_not_all_segments(cluster, new_topic):
    pids = {b.broker_id: b.pid for b in cluster.state.brokers.values()}
    before = {broker_id: open_files(pid) for broker_id, pid in pids.items()}
    topic = new_topic(PARTITIONS, segment_bytes="4096", index_interval_bytes="256")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1, linger_ms=0)
    for number in range(RECORDS):
        for partition in range(PARTITIONS):
            producer.send(topic, b"%06d" % number + b"v" * 194, partition=partition)
        producer.flush()
    producer.close()
    held = {b: segments_on_disk(cluster, b, topic) for b in pids}
    assert sum(held.values()) >= 4 * PARTITIONS, held  # the topic rolled: many inactive segments

    def settled() -> bool:
        # one log file per segment, and no index file left open; a few descriptors of slack
        # for connections that come and go
        return all(open_files(pid) - before[b] <= held[b] + 4 for b, pid in pids.items())

    wait_until(settled, 60, "idle index files closed: one open file per segment")

    # Reading everything back searches every segment's indexes without opening any of them.
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
    )
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    for partition in partitions:
        consumer.seek(partition, RECORDS // 2)  # an offset in the middle: an index lookup
    seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    for message in consumer:
        seen[message.partition].append(int(message.value[:6]))
        if all(len(values) == RECORDS - RECORDS // 2 for values in seen.values()):
            break
    consumer.close()
    for partition, values in seen.items():
        assert values == list(range(RECORDS // 2, RECORDS)), (partition, values[:5])
    for broker_id, pid in pids.items():
        extra = open_files(pid) - before[broker_id]
        assert extra <= held[broker_id] + 4, (broker_id, extra, held[broker_id])
