"""The leader's side of a follower's fetch within an incremental fetch session: REPLICA_FETCH
(tidelog's own, from inter.broker.protocol.version 0.10.0-IV0), or Kafka's Fetch v7 and later
from a replica (KIP-227's sessions, followers at 1.1 and later). Both carry the same session
fields and are answered alike.

Work per fetch grows with the partitions that changed (named in the fetch, appended to, or
whose high watermark moved), not with all the partitions the session holds: only those are read,
update follower state (high watermark, ISR) and go into the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tidelog.broker.replica_manager import ReplicaManager
from tidelog.errors import ErrorCode, KafkaError
from tidelog.replication.fetch_session import NEW_SESSION_ID, FetchSession, TopicPartition

# how an error is logged and turned into its code: RequestHandler._error
ErrorReporter = Callable[[ErrorCode, str, KafkaError], int]


async def answer_replica_fetch(replicas: ReplicaManager, body: dict, report: ErrorReporter) -> dict:
    """Opens or continues the follower's session, then answers as a Fetch v3 would: once
    min_bytes are there, a partition fails, or max_wait_time has passed."""
    replica_id = body["replica_id"]
    named = {
        (t["topic"], p["partition"]): (p["fetch_offset"], p["max_bytes"])
        for t in body["topics"]
        for p in t["partitions"]
    }
    forgotten_topics = body.get("forgotten_topics", body.get("forgotten_topics_data", []))
    forgotten = [(t["topic"], p) for t in forgotten_topics for p in t["partitions"]]
    sessions = replicas.fetch_sessions
    try:
        if replica_id < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "REPLICA_FETCH is for brokers only")
        if body["session_id"] == NEW_SESSION_ID:
            session = sessions.open(replica_id, named)
        else:
            session = sessions.get(body["session_id"], body["session_epoch"], replica_id)
            sessions.update(session, named, forgotten)
    except KafkaError as error:
        code = report(error.code, f"replica fetch by broker {replica_id}", error)
        return {"throttle_time_ms": 0, "error_code": code, "session_id": 0, "responses": []}
    session.epoch += 1
    replicas.last_fetch_ms[replica_id] = replicas.clock.milliseconds()
    replicas.note_follower_log_starts(replica_id, body["topics"])  # Fetch v5+: DeleteRecords
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(body["max_wait_time"], 0) / 1000
    arrived = True  # follower positions are recorded by a fetch's reads as it arrives only
    while True:
        session.event.clear()
        answers, whole, total, failed = _read_changed(
            replicas, session, body["max_bytes"], report, arrived
        )
        answered_as_arrived, arrived = arrived, False
        remaining = deadline - loop.time()
        if total >= body["min_bytes"] or failed or remaining <= 0:
            break
        # the deadline sets the event too: a timer callback, not an asyncio.timeout (its
        # context manager and task bookkeeping cost more on each parked fetch)
        timer = loop.call_at(deadline, session.event.set)
        try:
            await session.event.wait()
        finally:
            timer.cancel()
    by_topic: dict[str, list[dict]] = {}
    for (topic, _), answer in answers.items():
        by_topic.setdefault(topic, []).append(answer)
    # answered whole (nothing more to read, this high watermark sent): not changed any more,
    # once the follower's position was recorded with it (a fetch woken while parked records
    # none: the next fetch reads them again as it arrives, which also tries a caught-up
    # follower out of the ISR for rejoining); answered with data: to the back of the queue,
    # behind those this answer had no room for
    for key in whole:
        if answered_as_arrived:
            session.changed.pop(key, None)
        session.sent_high_watermarks[key] = answers[key]["high_watermark"]
    for key in answers:
        if key in session.changed:
            del session.changed[key]
            session.changed[key] = None
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": session.session_id,
        "responses": [{"topic": t, "partition_responses": p} for t, p in by_topic.items()],
    }


def _read_changed(
    replicas: ReplicaManager,
    session: FetchSession,
    max_bytes: int,
    report: ErrorReporter,
    arrived: bool,
) -> tuple[dict[TopicPartition, dict], list[TopicPartition], int, bool]:
    """Reads the session's changed partitions, in the session's order, until ``max_bytes`` are
    read (the rest stay changed, for the next fetch); the reads of a fetch that ``arrived``
    (not one woken while parked) record the follower's positions. Returns the answers worth
    sending (data, a new high watermark or an error), those of them answered whole (no data left
    to read), the bytes in them and whether one failed."""
    answers: dict[TopicPartition, dict] = {}
    whole: list[TopicPartition] = []
    total = 0
    failed = False
    for key in list(session.changed):
        if total and total >= max_bytes:
            break  # full: reading the others would only update follower state, again next time
        topic, number = key
        fetch_offset, partition_max_bytes = session.partitions[key]
        answer: dict[str, Any] = {
            "partition": number,
            "error_code": 0,
            "high_watermark": -1,
            "last_stable_offset": -1,
            "log_start_offset": -1,
            "aborted_transactions": None,
            "record_set": b"",
        }
        throttled = _leader_throttled(replicas, key, session.replica_id)
        if throttled and replicas.throttle is not None and replicas.throttle.leader.exceeded():
            # KIP-73: left changed, read once the leader quota allows; but where the follower
            # is counts now, as Kafka's throttled read records it: one caught up rejoins the ISR
            if arrived:
                partition = replicas.partitions.get(key)
                if partition is not None and partition.is_leader:
                    replicas.record_follower_position(partition, session.replica_id, fetch_offset)
            continue
        try:
            result = replicas.read(
                topic,
                number,
                fetch_offset,
                min(partition_max_bytes, max(max_bytes - total, 0)),
                replica_id=session.replica_id,
                min_one_message=total == 0,
                follower_position=arrived,
            )
        except KafkaError as error:
            answer["error_code"] = report(
                error.code,
                f"replica fetch by broker {session.replica_id} from {topic}-{number}",
                error,
            )
            answers[key] = answer
            whole.append(key)
            failed = True
            continue
        # with no transactions the last stable offset is the high watermark (Fetch v7+ has both)
        answer["high_watermark"] = answer["last_stable_offset"] = result.high_watermark
        answer["log_start_offset"] = result.log_start_offset
        answer["record_set"] = result.data
        total += result.size
        if throttled and replicas.throttle is not None:
            replicas.throttle.leader.record(result.size)
        if result.size:
            answers[key] = answer
        elif session.sent_high_watermarks.get(key) != result.high_watermark:
            answers[key] = answer
            whole.append(key)
        elif arrived and session.replica_id in replicas.leader_partition(topic, number).isr:
            del session.changed[key]  # nothing new: it waits for the next append
        # else a caught-up follower out of the ISR stays changed, so that each of its fetches
        # tries again to bring it back in: the first try can come before this broker has seen
        # the follower register again, and an idle partition would never be read again; and a
        # partition read by a fetch woken while parked stays changed until a fetch arriving
        # has recorded the follower's position (a new leadership forgets them)
    return answers, whole, total, failed


def _leader_throttled(replicas: ReplicaManager, key: TopicPartition, follower: int) -> bool:
    """Whether the leader quota counts ``follower``'s fetch of ``key`` (KIP-73)."""
    throttle = replicas.throttle
    if throttle is None or throttle.leader.unlimited:
        return False
    partition = replicas.partitions.get(key)
    return partition is not None and throttle.leader_throttled(*key, follower, partition.isr)
