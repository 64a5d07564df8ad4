"""The upgrade's format checks read v0/v1 messages and v2 batches from segment bytes alike."""

from __future__ import annotations

from tidelog.records.format import Codec, Record, build_message_set
from tidelog.records.record_batch import BatchRecordInput, encode_batch
from tidelog.upgrade import checks


def test_a_segment_of_v1_messages_then_v2_batches_is_walked_by_last_offset(tmp_path):
    v1 = build_message_set([Record(b"k", b"v", 1)] * 2, magic=1, base_offset=0)
    v1_lz4 = build_message_set([Record(b"k", b"v", 1)] * 3, magic=1, base_offset=2, codec=Codec.LZ4)
    batch = encode_batch([BatchRecordInput(b"k", b"v", 1)] * 4, base_offset=5)
    (tmp_path / "00000000000000000000.log").write_bytes(v1 + v1_lz4 + batch)

    walked = [(first, last, magic, count) for first, last, _, magic, count in checks.walk(tmp_path)]

    # a compressed v1 wrapper carries its last inner offset; a batch its base and last
    assert walked == [(0, 0, 1, 1), (1, 1, 1, 1), (4, 4, 1, 1), (5, 8, 2, 4)]
    assert [e[:2] for e in checks.walk(tmp_path, since=6)] == [(5, 8)]  # the batch holds 6
    assert list(checks.entries(tmp_path, since=5)) == [(5, 2)]
