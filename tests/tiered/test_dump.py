"""``tidelog dump-log`` on the remote index files a remote log manager wrote."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.tiered.test_manager import KEY, Broker, remote_config


def dump_log(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "dump-log", *args],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("message_format", ["0.10.0", "2.1"])
def test_remote_indexes_dump_as_json_and_verify_against_the_remote_data(
    tmp_path, clock, message_format
):
    config = remote_config(message_format_version=message_format)
    broker = Broker(tmp_path / "leader", tmp_path / "remote", clock, config)
    try:
        broker.fill(clock, 40)
        broker.remote.run_task_now(KEY)
        [log_index] = sorted(broker.log.directory.glob("*.remoteLogIndex"))
    finally:
        broker.close()
    files = [
        str(log_index.with_suffix(s))
        for s in (".remoteLogIndex", ".remoteOffsetIndex", ".remoteTimeIndex")
    ]

    verified = dump_log("--verify-index", "--json", *files)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    dumps = json.loads(verified.stdout)
    assert [d["kind"] for d in dumps] == [
        "remote_log_index",
        "remote_offset_index",
        "remote_time_index",
    ]
    assert all(d["mismatches"] == [] for d in dumps)
    entries = dumps[0]["entries"]
    assert entries[0]["first_offset"] == 0 and entries[0]["uri"].startswith("file://")
    assert len(dumps[1]["entries"]) == len(entries) == len(dumps[2]["entries"])

    text = dump_log(files[0])
    assert text.returncode == 0 and "firstOffset: 0 lastOffset:" in text.stdout


def test_a_flipped_byte_in_a_remote_log_index_entry_fails_its_crc(tmp_path, clock):
    broker = Broker(tmp_path / "leader", tmp_path / "remote", clock, remote_config())
    try:
        broker.fill(clock, 40)
        broker.remote.run_task_now(KEY)
        [log_index] = sorted(broker.log.directory.glob("*.remoteLogIndex"))
    finally:
        broker.close()
    data = bytearray(log_index.read_bytes())
    data[30] ^= 0x40  # inside the first entry's lastOffset / timestamps
    log_index.write_bytes(bytes(data))

    result = dump_log("--verify-index", str(log_index))
    assert result.returncode == 1
    assert "Mismatch: entry at position 0: CRC mismatch" in result.stdout
