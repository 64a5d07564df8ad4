"""File slices go out with sendfile, whole and in order, to fast and to slow readers alike."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
import uvloop

from tests.conftest import message_set
from tidelog.broker.server import _send_slice
from tidelog.log.segment import FileSlice

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


async def serve_and_read(file_slice: FileSlice, before: bytes, after: bytes, slow: bool) -> bytes:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(before)
        await _send_slice(writer, writer.transport.get_extra_info("socket"), file_slice)
        writer.write(after)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if slow:  # a small window: the sender finds the socket full again and again
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    received = bytearray()
    while chunk := await reader.read(65536):
        received += chunk
    writer.close()
    server.close()
    await server.wait_closed()
    return bytes(received)


@pytest.mark.parametrize("loop", sorted(LOOPS))
@pytest.mark.parametrize("slow", [False, True], ids=["fast-reader", "slow-reader"])
def test_a_slice_arrives_whole_between_what_was_written_around_it(
    tmp_path, monkeypatch, loop, slow
):
    copied = []  # the chunks that went through the transport when the socket was full
    pread = os.pread
    monkeypatch.setattr(os, "pread", lambda *args: copied.append(pread(*args)) or copied[-1])
    data = os.urandom(6_000_000)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    with open(path, "rb") as file:
        file_slice = FileSlice(file, 1_000, 5_000_000)  # starts and ends mid-file
        runner = asyncio.Runner(loop_factory=LOOPS[loop])
        with runner:
            received = runner.run(serve_and_read(file_slice, b"header", b"trailer", slow))

    assert received == b"header" + data[1_000:5_001_000] + b"trailer"
    if slow:  # most of it still went by sendfile
        assert 0 < sum(map(len, copied)) < 5_000_000 / 4


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_slice_whose_segment_was_deleted_after_the_read_is_sent_whole(make_log, clock, loop):
    """A fetch is read, then retention deletes the segment (on tiered topics local retention
    does so every few seconds) before the answer is sent: the answer still goes out whole. The
    leader used to fail with "I/O operation on closed file" and close the follower's
    connection, which then waited replica.fetch.backoff.ms and fetched everything again."""
    log = make_log(segment_bytes=100_000, retention_bytes=1)
    for _ in range(30):
        clock.advance(10)
        log.append_as_leader(message_set(100, timestamp=clock.milliseconds()))
    log.high_watermark = log.log_end_offset
    file_slice = log.read(0, 10**7).slice
    expected = file_slice.read()
    assert log.delete_old_segments() >= 1 and log.local_log_start_offset > 0

    runner = asyncio.Runner(loop_factory=LOOPS[loop])
    with runner:
        received = runner.run(serve_and_read(file_slice, b"header", b"trailer", slow=True))

    assert received == b"header" + expected + b"trailer"


@pytest.mark.parametrize(("records", "by_sendfile"), [(3, False), (1_000, True)])
def test_a_small_fetch_answer_goes_out_copied_and_a_large_one_by_sendfile(
    tmp_path, monkeypatch, records, by_sendfile
):
    """A follower's fetch answer of a batch or two is a few hundred bytes: a copy and one write
    cost less than a sendfile and the two setsockopt calls that cork it. Above
    INLINE_SLICE_BYTES the slice goes with zero copy. Either way the records arrive whole."""
    from tests.broker.test_connection_order import FETCH, answers_to, produce
    from tidelog.broker.server import INLINE_SLICE_BYTES
    from tidelog.protocol.schemas import ApiKey

    sent = []
    sendfile = os.sendfile
    monkeypatch.setattr(os, "sendfile", lambda *args: sent.append(args) or sendfile(*args))
    body = produce(records)
    stored = bytes(body["topic_data"][0]["data"][0]["record_set"])
    assert (len(stored) > INLINE_SLICE_BYTES) == by_sendfile
    _, fetched = asyncio.run(answers_to(tmp_path, (ApiKey.PRODUCE, body), (ApiKey.FETCH, FETCH)))
    partition = fetched["responses"][0]["partition_responses"][0]
    assert partition["high_watermark"] == records
    assert len(bytes(partition["record_set"])) == len(stored)
    assert bool(sent) == by_sendfile
