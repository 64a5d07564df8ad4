"""Codecs framed as Kafka frames them: xerial snappy, lz4's checksum rules (KIP-57), zstd frames
as Kafka's streaming reader takes them."""

from __future__ import annotations

import struct
import time
from concurrent.futures import ThreadPoolExecutor

import cramjam
import lz4.frame
import pytest
import xxhash
import zstandard

from tidelog.errors import ErrorCode, KafkaError
from tidelog.records.compression import XERIAL_HEADER, compress, decompress
from tidelog.records.format import Codec

DATA = bytes(range(256)) * 600  # 150 KiB: several snappy blocks, several lz4 blocks


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_what_is_compressed_decompresses(codec, magic):
    assert decompress(codec, compress(codec, DATA, magic), magic) == DATA


def test_snappy_uses_xerial_framing_with_32k_blocks():
    framed = compress(Codec.SNAPPY, DATA, 1)

    assert framed.startswith(XERIAL_HEADER)
    first_block_length = int.from_bytes(framed[16:20], "big")
    first_block = framed[20 : 20 + first_block_length]
    assert len(bytes(cramjam.snappy.decompress_raw(first_block))) == 32 * 1024


def test_raw_snappy_as_librdkafka_writes_it_is_accepted():
    raw = bytes(cramjam.snappy.compress_raw(DATA))

    assert decompress(Codec.SNAPPY, raw, 1) == DATA


def _header_checksum(frame: bytes, start: int) -> int:
    return (xxhash.xxh32_intdigest(frame[start:6]) >> 8) & 0xFF


def test_lz4_for_v1_has_the_correct_header_checksum():
    frame = compress(Codec.LZ4, DATA, 1)

    assert frame[6] == _header_checksum(frame, 4)
    assert lz4.frame.decompress(frame) == DATA


def test_lz4_for_v0_keeps_kafkas_old_checksum_over_the_magic_too():
    frame = compress(Codec.LZ4, DATA, 0)

    assert frame[6] == _header_checksum(frame, 0)
    assert frame[6] != _header_checksum(frame, 4)
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(frame)  # a strict reader refuses it, which is why v1 fixed it


def test_lz4_frames_of_either_kind_are_read_in_either_format():
    for written_as in (0, 1):
        for read_as in (0, 1):
            assert decompress(Codec.LZ4, compress(Codec.LZ4, DATA, written_as), read_as) == DATA


def test_lz4_frames_of_either_kind_are_read_from_a_view_into_a_larger_buffer():
    for written_as in (0, 1):
        frame = compress(Codec.LZ4, DATA, written_as)
        segment = memoryview(b"before" + frame + b"after")

        assert decompress(Codec.LZ4, segment[6 : 6 + len(frame)], 2) == DATA


def test_an_lz4_skippable_frame_is_not_read_as_an_empty_one():
    skippable = struct.pack("<II", 0x184D2A50, 4) + b"skip"
    for data in (skippable, skippable + compress(Codec.LZ4, DATA, 1)):
        with pytest.raises(KafkaError) as refused:
            decompress(Codec.LZ4, data, 1)
        assert refused.value.code == ErrorCode.CORRUPT_MESSAGE


def test_zstd_is_written_at_kafkas_default_level_with_its_content_size():
    frame = compress(Codec.ZSTD, DATA, 2)

    assert frame == zstandard.ZstdCompressor(level=3).compress(DATA)
    assert zstandard.get_frame_parameters(frame).content_size == len(DATA)
    assert decompress(Codec.ZSTD, frame, 2) == DATA


def test_zstd_frames_without_their_size_and_one_after_another_are_read():
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(DATA)
    assert zstandard.get_frame_parameters(streamed).content_size == zstandard.CONTENTSIZE_UNKNOWN

    assert decompress(Codec.ZSTD, streamed, 2) == DATA
    assert decompress(Codec.ZSTD, streamed + compress(Codec.ZSTD, b"more", 2), 2) == DATA + b"more"
    assert decompress(Codec.ZSTD, memoryview(streamed), 2) == DATA


def test_skippable_zstd_frames_are_passed_over():
    skippable = struct.pack("<II", 0x184D2A50, 4) + b"meta"
    frame = compress(Codec.ZSTD, DATA, 2)

    assert decompress(Codec.ZSTD, skippable + frame, 2) == DATA
    assert decompress(Codec.ZSTD, frame + skippable, 2) == DATA


def test_a_megabyte_of_tiny_zstd_frames_is_read_at_once_not_frame_by_frame():
    empty = zstandard.ZstdCompressor().compress(b"")
    frames = empty * (1_000_000 // len(empty))  # 111,111 frames

    started = time.perf_counter()
    assert decompress(Codec.ZSTD, frames + compress(Codec.ZSTD, b"end", 2), 2) == b"end"
    assert time.perf_counter() - started < 1  # about 10 ms; frame by frame, 2 s


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda frame: frame[:-3], id="cut short"),
        pytest.param(lambda frame: frame[:4], id="only the magic"),
        pytest.param(lambda frame: b"", id="empty"),
        pytest.param(lambda frame: frame + b"garbage", id="garbage after the frame"),
        pytest.param(lambda frame: frame[:4] + b"\xff" * 8 + frame[12:], id="corrupt header"),
    ],
)
def test_a_damaged_zstd_frame_is_corrupt_message(damage):
    with pytest.raises(KafkaError) as raised:
        decompress(Codec.ZSTD, damage(compress(Codec.ZSTD, DATA, 2)), 2)

    assert raised.value.code == ErrorCode.CORRUPT_MESSAGE


def test_zstd_from_many_threads_at_once_round_trips():
    inputs = [DATA[n:] + bytes([n]) * n for n in range(64)]

    def round_trip(data: bytes) -> bytes:
        return decompress(Codec.ZSTD, compress(Codec.ZSTD, data, 2), 2)

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(round_trip, inputs * 8)) == inputs * 8


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_garbage_is_corrupt_message_not_a_crash(codec):
    with pytest.raises(KafkaError) as raised:
        decompress(codec, b"\x82SNAPPY\x00garbage-garbage-garbage", 2 if codec == Codec.ZSTD else 1)

    assert raised.value.code == ErrorCode.CORRUPT_MESSAGE
