"""The files the engine writes, read by independent tools: kafka-python and `tidelog dump-log`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import message_set
from tests.records.test_format import read_with_kafka_python
from tidelog.records.format import (
    MESSAGE_SET_CODECS,
    Codec,
    Record,
    build_message_set,
    iter_deep,
)


@pytest.fixture
def written_log(make_log, clock):
    """A log of both formats' worth of codecs and timestamp types, closed cleanly."""
    log = make_log(segment_bytes=1500, index_interval_bytes=500)
    for number, codec in enumerate(list(MESSAGE_SET_CODECS) * 4):
        clock.advance(7)
        stamps = [clock.milliseconds() - (number % 3) * i for i in range(6)]
        log.append_as_leader(message_set(6, codec=codec, timestamp=lambda i, s=stamps: s[i]))
    log.append_as_leader(message_set(3, key=None))
    log.close()
    return log


def test_log_files_read_by_kafka_python_give_the_same_messages(written_log):
    seen = []
    for segment in written_log.segments:
        data = segment.log_path.read_bytes()
        theirs = read_with_kafka_python(data)
        ours = [(m.offset, m.timestamp, m.key, m.value) for m in iter_deep(data)]
        assert theirs == ours
        seen += [offset for offset, *_ in theirs]

    assert seen == list(range(99))
    assert len(written_log.segments) > 3


def tidelog(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "dump-log", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_dump_log_prints_every_message_and_inner_messages_on_request(written_log):
    first = str(written_log.segments[0].log_path)

    shallow = tidelog(first)
    deep = tidelog("--deep-iteration", "--print-data-log", first)

    assert shallow.returncode == 0, shallow.stderr
    assert "offset: 0 position: 0 CreateTime:" in shallow.stdout
    assert "compresscodec: GZIP" in shallow.stdout and "isvalid: true" in shallow.stdout
    wrappers = shallow.stdout.count("compresscodec: ") - shallow.stdout.count("codec: NONE")
    # each wrapper's 6 messages in its place
    assert deep.stdout.count("offset:") == shallow.stdout.count("offset:") + wrappers * 5
    assert "key: key payload: AAAA" in deep.stdout


def test_dump_log_verifies_indexes_against_the_log(written_log):
    indexes = [
        str(path)
        for segment in written_log.segments
        for path in (segment.index.path, segment.time_index.path)
    ]

    result = tidelog("--verify-index", *indexes)  # one command for them all, as Kafka's

    assert result.returncode == 0, result.stdout
    assert result.stdout.count("all match") == len(indexes)


def test_dump_log_reports_an_index_entry_that_points_at_the_wrong_place(written_log):
    index = written_log.segments[0].index.path
    data = bytearray(index.read_bytes())
    data[7] += 1  # the first entry's position, off by one byte
    index.write_bytes(bytes(data))

    result = tidelog("--verify-index", str(index))

    assert result.returncode == 1
    assert (
        "Mismatch: index entry" in result.stdout and "no valid entry starts there" in result.stdout
    )


def test_dump_log_json_is_machine_readable(written_log):
    segment = written_log.segments[-1]
    result = tidelog("--json", str(segment.log_path), str(segment.time_index.path))

    dumps = json.loads(result.stdout)
    assert [d["kind"] for d in dumps] == ["log", "time_index"]
    assert dumps[0]["messages"][-1]["key_size"] == -1
    assert dumps[0]["invalid_bytes"] == 0


def test_dump_log_reports_invalid_bytes_at_the_end(written_log):
    path = written_log.segments[-1].log_path
    with open(path, "ab") as file:
        file.write(b"\x00" * 20)

    result = tidelog(str(path))

    assert result.returncode == 1
    assert "Found 20 invalid bytes at the end" in result.stdout


def test_dump_log_names_a_file_it_cannot_read(tmp_path):
    result = tidelog(str(tmp_path / "missing.log"))

    assert result.returncode == 1
    assert "missing.log" in result.stderr


def test_v0_and_v1_messages_are_dumped_in_kafka_0_10_2s_words(tmp_path):
    """DumpLogSegments of Kafka 0.10.2: offset, position, timestamp type and time, isvalid,
    payloadsize, magic, the codec's constant, crc, then keysize only for a key; with
    --print-data-log the key and payload that are not null (a wrapper's payload is its
    compressed bytes, as Kafka's StringDecoder prints them); --deep-iteration puts a wrapper's
    messages in its place, at its position."""
    v0 = build_message_set([Record(None, b"zero")], magic=0)
    v1 = build_message_set([Record(b"k", None, 1001)], magic=1, base_offset=1)
    wrapper = build_message_set(
        [Record(b"a", b"AA", 1002), Record(None, b"BB", 1003)],
        magic=1,
        codec=Codec.GZIP,
        base_offset=2,
    )
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(v0 + v1 + wrapper)

    def crc(data: bytes) -> int:
        return int.from_bytes(data[12:16], "big")

    shallow = tidelog(str(path)).stdout.splitlines()
    deep = tidelog("--deep-iteration", "--print-data-log", str(path)).stdout.splitlines()
    inner = list(iter_deep(wrapper))

    assert shallow[1:] == [
        "Starting offset: 0",
        f"offset: 0 position: 0 NoTimestampType: -1 isvalid: true payloadsize: 4 magic: 0 "
        f"compresscodec: NONE crc: {crc(v0)}",
        f"offset: 1 position: {len(v0)} CreateTime: 1001 isvalid: true payloadsize: -1 "
        f"magic: 1 compresscodec: NONE crc: {crc(v1)} keysize: 1",
        f"offset: 3 position: {len(v0) + len(v1)} CreateTime: 1003 isvalid: true "
        f"payloadsize: {len(wrapper) - 34} magic: 1 compresscodec: GZIP crc: {crc(wrapper)}",
    ]
    assert deep[2:4] == [
        shallow[2] + " payload: zero",
        shallow[3] + " key: k",
    ]
    assert deep[4:] == [
        f"offset: 2 position: {len(v0) + len(v1)} CreateTime: 1002 isvalid: true "
        f"payloadsize: 2 magic: 1 compresscodec: NONE crc: {inner[0].crc} keysize: 1 key: a "
        "payload: AA",
        f"offset: 3 position: {len(v0) + len(v1)} CreateTime: 1003 isvalid: true "
        f"payloadsize: 2 magic: 1 compresscodec: NONE crc: {inner[1].crc} payload: BB",
    ]
