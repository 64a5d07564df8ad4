"""A connection's requests read ahead of their answers: answered in request order, a bounded
read-ahead, and requests outside the pipelined APIs served only after those before them."""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct

import pytest

from tidelog.broker.handlers import Pending
from tidelog.broker.metrics import Metrics
from tidelog.broker.server import READ_BYTES, Entry, KafkaServer, ResponseQueue
from tidelog.protocol.frames import SIZE, Request, decode_response, encode_request
from tidelog.protocol.schemas import ApiKey


def entry(size: int = 10, answer=None) -> Entry:  # type: ignore[no-untyped-def]
    return Entry(ApiKey.PRODUCE, 2, 1, answer, size, None, 0.0)


def test_the_queue_takes_requests_up_to_its_count_and_bytes():
    queue = ResponseQueue(max_requests=3, max_bytes=100)
    assert queue.fits(1000)  # an empty queue takes one request of any size
    queue.put(entry(60))
    assert queue.fits(40) and not queue.fits(41)
    queue.put(entry(20))
    queue.put(entry(10))
    assert not queue.fits(1)  # three in flight
    queue.answered()
    assert queue.fits(70) and not queue.fits(71)


def test_the_queue_frees_room_only_as_the_oldest_is_answered():
    async def scenario() -> list[str]:
        queue = ResponseQueue(max_requests=1, max_bytes=100)
        events = []
        queue.put(entry())

        async def reader() -> None:
            await queue.room(10)
            events.append("room")

        waiting = asyncio.create_task(reader())
        await asyncio.sleep(0.01)
        events.append("answering")
        queue.answered()
        await waiting
        return events

    assert asyncio.run(scenario()) == ["answering", "room"]


def test_next_ready_waits_for_the_oldest_answer_even_when_later_ones_are_ready():
    async def scenario() -> None:
        queue = ResponseQueue(max_requests=10, max_bytes=1000)
        first = asyncio.get_running_loop().create_future()
        queue.put(entry(answer=Pending(first, lambda body: body)))
        queue.put(entry(answer={"ready": True}))
        assert queue.next_ready() is None
        first.set_result({"first": True})
        assert queue.next_ready() is queue.entries[0]

    asyncio.run(scenario())


def test_a_read_ahead_of_nothing_is_refused():
    with pytest.raises(ValueError):
        ResponseQueue(max_requests=0, max_bytes=1)


class ScriptedHandler:
    """A request handler whose pipelined (Produce) answers complete when the test says so;
    Metadata is served one at a time and notes when it ran."""

    PIPELINED = frozenset({ApiKey.PRODUCE})

    def __init__(self, fail_start: int | None = None) -> None:
        self.started: list[int] = []  # correlation ids, in the order their first stage ran
        self.futures: dict[int, asyncio.Future] = {}
        self.served: list[tuple[int, list[int]]] = []  # (metadata id, produces answered before)
        self.answered: list[int] = []
        self.fail_start = fail_start  # a produce whose first stage raises (a disk error, say)
        self.metadata_gate: asyncio.Event | None = None  # Metadata waits for it, if set
        self.metadata_done: list[int] = []

    def serves(self, api_key: int, api_version: int = 0) -> bool:
        return api_key in (ApiKey.PRODUCE, ApiKey.METADATA)

    def start(self, request: Request) -> Pending:
        if request.correlation_id == self.fail_start:
            raise OSError("No space left on device")
        self.started.append(request.correlation_id)
        future = asyncio.get_running_loop().create_future()
        self.futures[request.correlation_id] = future

        def finish(_: object, correlation_id: int = request.correlation_id) -> dict:
            self.answered.append(correlation_id)
            return {"responses": [], "throttle_time_ms": 0}

        return Pending(future, finish)

    async def handle(self, request: Request, listener: str = "PLAINTEXT") -> dict:
        self.served.append((request.correlation_id, list(self.answered)))
        if self.metadata_gate is not None:
            await self.metadata_gate.wait()
        self.metadata_done.append(request.correlation_id)
        return {"brokers": [], "topic_metadata": [], "controller_id": 1, "cluster_id": None}


PRODUCE = {"acks": -1, "timeout": 1000, "topic_data": []}


async def serving(handler: ScriptedHandler, **bounds: int) -> KafkaServer:
    server = KafkaServer(
        handler,  # type: ignore[arg-type]
        Metrics(),
        host="127.0.0.1",
        port=0,
        max_request_bytes=1 << 20,
        **bounds,
    )
    await server.start()
    return server


async def read_response(reader: asyncio.StreamReader, api_key: ApiKey, version: int) -> int:
    (size,) = SIZE.unpack(await reader.readexactly(SIZE.size))
    correlation_id, _ = decode_response(api_key, version, await reader.readexactly(size))
    return correlation_id


async def until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"waited 2 s for {what}")


def test_answers_go_out_in_request_order_when_they_complete_in_another():
    async def scenario() -> list[int]:
        handler = ScriptedHandler()
        server = await serving(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        for correlation_id in range(1, 6):
            writer.write(encode_request(ApiKey.PRODUCE, 2, correlation_id, "t", PRODUCE))
        await until(lambda: len(handler.started) == 5, "five requests started")
        for correlation_id in (5, 3, 4, 2):  # every one but the oldest
            handler.futures[correlation_id].set_result({})
        await asyncio.sleep(0.05)
        assert handler.answered == []  # nothing goes out before the oldest answer
        handler.futures[1].set_result({})
        order = [await read_response(reader, ApiKey.PRODUCE, 2) for _ in range(5)]
        writer.close()
        await server.stop()
        assert handler.started == [1, 2, 3, 4, 5]
        return order

    assert asyncio.run(scenario()) == [1, 2, 3, 4, 5]


def test_read_ahead_stops_at_the_bound_and_goes_on_as_answers_go_out():
    async def scenario() -> None:
        handler = ScriptedHandler()
        server = await serving(handler, max_inflight_requests=3)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        for correlation_id in range(1, 11):
            writer.write(encode_request(ApiKey.PRODUCE, 2, correlation_id, "t", PRODUCE))
        await until(lambda: len(handler.started) == 3, "three requests started")
        await asyncio.sleep(0.05)
        assert handler.started == [1, 2, 3]  # the fourth is not read
        handler.futures[1].set_result({})
        assert await read_response(reader, ApiKey.PRODUCE, 2) == 1
        await until(lambda: len(handler.started) == 4, "the fourth request started")
        await asyncio.sleep(0.05)
        assert handler.started == [1, 2, 3, 4]
        writer.close()
        await server.stop()

    asyncio.run(scenario())


def test_read_ahead_stops_at_the_byte_bound():
    async def scenario() -> None:
        handler = ScriptedHandler()
        frame = encode_request(ApiKey.PRODUCE, 2, 1, "t", PRODUCE)
        server = await serving(handler, max_inflight_bytes=2 * (len(frame) - SIZE.size))
        _, writer = await asyncio.open_connection("127.0.0.1", server.port)
        for correlation_id in range(1, 6):
            writer.write(encode_request(ApiKey.PRODUCE, 2, correlation_id, "t", PRODUCE))
        await until(lambda: len(handler.started) == 2, "two requests started")
        await asyncio.sleep(0.05)
        assert handler.started == [1, 2]
        writer.close()
        await server.stop()

    asyncio.run(scenario())


def test_a_request_outside_the_pipelined_apis_waits_for_every_answer_before_it():
    async def scenario() -> None:
        handler = ScriptedHandler()
        server = await serving(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_request(ApiKey.PRODUCE, 2, 1, "t", PRODUCE))
        writer.write(encode_request(ApiKey.PRODUCE, 2, 2, "t", PRODUCE))
        writer.write(encode_request(ApiKey.METADATA, 0, 3, "t", {"topics": []}))
        writer.write(encode_request(ApiKey.PRODUCE, 2, 4, "t", PRODUCE))
        await until(lambda: len(handler.started) == 2, "two produces started")
        await asyncio.sleep(0.05)
        assert handler.served == [] and handler.started == [1, 2]
        handler.futures[2].set_result({})
        handler.futures[1].set_result({})
        assert [await read_response(reader, ApiKey.PRODUCE, 2) for _ in range(2)] == [1, 2]
        assert await read_response(reader, ApiKey.METADATA, 0) == 3
        assert handler.served == [(3, [1, 2])]
        await until(lambda: len(handler.started) == 3, "the produce after it started")
        handler.futures[4].set_result({})
        assert await read_response(reader, ApiKey.PRODUCE, 2) == 4
        writer.close()
        await server.stop()

    asyncio.run(scenario())


def test_a_malformed_frame_closes_the_connection_after_the_answers_before_it():
    async def scenario() -> None:
        handler = ScriptedHandler()
        server = await serving(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_request(ApiKey.PRODUCE, 2, 1, "t", PRODUCE))
        writer.write(struct.pack(">i", 6) + struct.pack(">hhh", 77, 0, 0))  # unknown API
        await until(lambda: len(handler.started) == 1, "the produce started")
        handler.futures[1].set_result({})
        assert await read_response(reader, ApiKey.PRODUCE, 2) == 1
        assert await reader.read() == b""  # then closed
        writer.close()
        await server.stop()

    asyncio.run(scenario())


def test_requests_sent_before_the_client_stops_sending_are_answered():
    async def scenario() -> None:
        handler = ScriptedHandler()
        server = await serving(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_request(ApiKey.PRODUCE, 2, 1, "t", PRODUCE))
        writer.write(encode_request(ApiKey.PRODUCE, 2, 2, "t", PRODUCE))
        writer.write_eof()
        await until(lambda: len(handler.started) == 2, "both produces started")
        handler.futures[1].set_result({})
        handler.futures[2].set_result({})
        assert [await read_response(reader, ApiKey.PRODUCE, 2) for _ in range(2)] == [1, 2]
        assert await reader.read() == b""
        writer.close()
        await server.stop()

    asyncio.run(scenario())


def test_answers_ready_before_a_failed_second_stage_still_go_out():
    async def scenario() -> None:
        handler = ScriptedHandler()
        server = await serving(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_request(ApiKey.PRODUCE, 2, 1, "t", PRODUCE))
        writer.write(encode_request(ApiKey.PRODUCE, 2, 2, "t", PRODUCE))
        await until(lambda: len(handler.started) == 2, "both produces started")
        handler.futures[1].set_result({})
        handler.futures[2].set_exception(RuntimeError("a second stage that failed"))
        assert await read_response(reader, ApiKey.PRODUCE, 2) == 1
        assert await reader.read() == b""  # then closed
        writer.close()
        await server.stop()

    asyncio.run(scenario())


def test_a_request_whose_first_stage_fails_closes_the_connection_after_those_before_it():
    async def scenario() -> None:
        handler = ScriptedHandler(fail_start=2)
        server = await serving(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_request(ApiKey.PRODUCE, 2, 1, "t", PRODUCE))
        writer.write(encode_request(ApiKey.PRODUCE, 2, 2, "t", PRODUCE))
        await until(lambda: len(handler.started) == 1, "the first produce started")
        await asyncio.sleep(0.05)  # the second has failed meanwhile
        handler.futures[1].set_result({})  # appended before the failure: it is answered
        assert await read_response(reader, ApiKey.PRODUCE, 2) == 1
        assert await reader.read() == b""
        writer.close()
        await server.stop()

    asyncio.run(scenario())


def test_a_client_gone_while_a_request_is_served_does_not_cut_that_request_short():
    async def scenario() -> None:
        handler = ScriptedHandler()
        handler.metadata_gate = asyncio.Event()
        server = await serving(handler)
        _, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_request(ApiKey.PRODUCE, 2, 1, "t", PRODUCE))
        writer.write(encode_request(ApiKey.METADATA, 0, 2, "t", {"topics": []}))
        await until(lambda: len(handler.started) == 1, "the produce started")
        # the client resets its connection before the produce's answer is written: writing
        # it fails, while the Metadata request after it (a commit, say) is being served
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        await asyncio.sleep(0.05)
        handler.futures[1].set_result({})
        await until(lambda: handler.served, "the Metadata request served")
        await asyncio.sleep(0.05)
        handler.metadata_gate.set()
        await until(lambda: handler.metadata_done, "the Metadata request done")
        await server.stop()

    asyncio.run(scenario())


def test_requests_are_read_whole_however_the_stream_cuts_them():
    """Frames split from what the stream holds: cut anywhere (within a size prefix, within a
    body), several in one read, or one larger than a read (READ_BYTES), each is read whole."""
    big = {"acks": -1, "timeout": 1000, "topic_data": [{"topic": "x" * 30_000, "data": []}] * 20}

    async def scenario() -> list[int]:
        handler = ScriptedHandler()
        server = await serving(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        stream = b"".join(
            encode_request(ApiKey.PRODUCE, 2, number, "t", big if number == 4 else PRODUCE)
            for number in range(1, 8)
        )
        assert len(stream) > READ_BYTES
        cuts = [0, 1, 2, 3, 5, 40, 41, 300_000, 300_002, len(stream)]
        for start, end in itertools.pairwise(cuts):  # each piece sent on its own
            writer.write(stream[start:end])
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write_eof()
        await until(lambda: len(handler.started) == 7, "seven requests started")
        for future in handler.futures.values():
            future.set_result({})
        order = [await read_response(reader, ApiKey.PRODUCE, 2) for _ in range(7)]
        writer.close()
        await server.stop()
        return order

    assert asyncio.run(scenario()) == [1, 2, 3, 4, 5, 6, 7]


def test_requests_that_arrive_together_are_split_from_one_read(monkeypatch):
    """Requests that arrive together cost one await of the stream, not two per request."""
    reads = []
    for name in ("read", "readexactly", "readuntil", "readline"):
        original = getattr(asyncio.StreamReader, name)

        def counted(self, *args, _original=original, _name=name):  # type: ignore[no-untyped-def]
            reads.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(asyncio.StreamReader, name, counted)

    async def scenario() -> None:
        handler = ScriptedHandler()
        server = await serving(handler)
        client = socket.create_connection(("127.0.0.1", server.port))
        client.sendall(
            b"".join(encode_request(ApiKey.PRODUCE, 2, n, "t", PRODUCE) for n in range(1, 51))
        )
        await until(lambda: len(handler.started) == 50, "fifty requests started")
        client.close()
        await server.stop()

    asyncio.run(scenario())
    assert 1 <= len(reads) <= 5
