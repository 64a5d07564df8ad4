"""A follower's fetcher against leaders that misbehave."""

from __future__ import annotations

import asyncio

from tests.conftest import message_set
from tidelog.replication.fetcher import FetcherSettings, ReplicaFetcher
from tidelog.replication.partition import Partition


async def follow_a_silent_leader(partition: Partition, settings: FetcherSettings) -> int:
    """Runs a fetcher for a second against a 'leader' that accepts connections and never
    answers; returns how many connections it opened."""
    accepted = 0
    held = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        held.append(writer)
        await reader.read()  # never answers

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    fetcher = ReplicaFetcher(2, 1, lambda: ("127.0.0.1", port), settings)
    fetcher.add(partition)
    await asyncio.sleep(1.0)
    await fetcher.stop()
    for writer in held:
        writer.close()
    server.close()
    return accepted


def test_a_leader_that_never_answers_is_given_up_and_asked_again(make_log, monkeypatch):
    monkeypatch.setattr("tidelog.replication.fetcher.RETRY_SECONDS", 0.05)
    partition = Partition("t", 0, 2, make_log())
    partition.make_follower(1, 1, (1, 2), frozenset({1, 2}))
    settings = FetcherSettings(socket_timeout_ms=200)

    connections = asyncio.run(follow_a_silent_leader(partition, settings))

    assert connections >= 3  # each request waited 0.2 s, then a new connection


def test_high_watermark_truncation_happens_before_any_word_from_the_leader(make_log):
    log = make_log()
    log.append_as_leader(message_set(10))
    log.high_watermark = 6
    partition = Partition("t", 0, 2, log)
    partition.make_follower(1, 1, (1, 2), frozenset({1, 2}))
    settings = FetcherSettings(truncation_mode="high-watermark")

    async def add_and_stop() -> None:
        fetcher = ReplicaFetcher(2, 1, lambda: None, settings)  # no leader reachable at all
        fetcher.add(partition)
        await fetcher.stop()

    asyncio.run(add_and_stop())

    assert log.log_end_offset == 6
