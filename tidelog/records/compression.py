"""The codecs of Kafka's message formats, framed exactly as Kafka frames them.

- gzip: a gzip stream (what java.util.zip.GZIPOutputStream writes).
- snappy: snappy-java's "xerial" framing: a 16-byte header, then blocks of int32 length + raw
  snappy data, each block holding up to 32 KiB of input. Reading also accepts a plain raw
  snappy block, which librdkafka writes.
- lz4: an LZ4 frame with independent 64 KiB blocks. Kafka before KIP-57 computed the frame
  header checksum (HC) over the magic number too; message format v0 keeps that broken checksum,
  v1 uses the correct one. Reading repairs the HC first, so either kind of frame is accepted.
  Format v2 uses the correct one too.
- zstd: a zstd frame at zstd's default level 3, as Kafka writes it; format v2 only (Kafka 2.1):
  older formats get UNSUPPORTED_COMPRESSION_TYPE. Reading accepts frames with or without their
  content size and several frames one after the other (skippable ones too), as Kafka's
  streaming reader does. Each thread keeps one compression and one decompression context:
  setting one up costs about 16 us, seven times the decompression of a small batch.
"""

from __future__ import annotations

import struct
import threading
import zlib

import cramjam
import lz4.frame
import xxhash
import zstandard

from tidelog.errors import ErrorCode, KafkaError
from tidelog.records.format import Codec

XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
LZ4_MAGIC = b"\x04\x22\x4d\x18"
LZ4_FLG_CONTENT_SIZE = 0x08
LZ4_FLG_DICT_ID = 0x01
ZSTD_LEVEL = 3  # zstd's default, and Kafka's


class _ZstdContexts(threading.local):
    """This thread's zstd contexts (a context serves one call at a time)."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        self.decompressor = zstandard.ZstdDecompressor()


_zstd = _ZstdContexts()


def _require_v2_for_zstd(codec: Codec | int, magic: int) -> None:
    if codec == Codec.ZSTD and magic < 2:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            "zstd needs message format v2 (message.format.version 2.1)",
        )


def compress(codec: Codec | int, data: bytes | bytearray | memoryview, magic: int) -> bytes:
    _require_v2_for_zstd(codec, magic)
    if codec == Codec.ZSTD:
        return _zstd.compressor.compress(data)
    if codec == Codec.GZIP:
        compressor = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: a gzip stream
        return compressor.compress(data) + compressor.flush()
    if codec == Codec.SNAPPY:
        return _xerial_snappy(data)
    if codec == Codec.LZ4:
        frame = lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        if magic == 0:
            return _with_header_checksum(frame, broken=True)
        return frame
    raise ValueError(f"codec {codec!r} does not compress")


def decompress(codec: Codec | int, data: bytes | bytearray | memoryview, magic: int) -> bytes:
    """The inner message set of a compressed wrapper (or a v2 batch's records); CORRUPT_MESSAGE
    if it does not decode."""
    _require_v2_for_zstd(codec, magic)
    try:
        if codec == Codec.ZSTD:
            return _zstd_frames(data)
        if codec == Codec.GZIP:
            return zlib.decompress(data, 47)  # wbits 47: gzip or zlib, detected from the header
        if codec == Codec.SNAPPY:
            return _unframe_snappy(data)
        if codec == Codec.LZ4:
            return _lz4_frame(data)
    except (
        zlib.error,
        RuntimeError,
        ValueError,
        cramjam.DecompressionError,
        zstandard.ZstdError,
    ) as error:
        name = Codec(codec).name.lower()
        raise KafkaError(
            ErrorCode.CORRUPT_MESSAGE, f"{name} data does not decode: {error}"
        ) from None
    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"unknown compression codec {int(codec)}")


def _zstd_frames(data: bytes | bytearray | memoryview) -> bytes:
    """The content of a zstd frame; ValueError if it is cut short. More than one frame (no
    Kafka client writes them) is read by cramjam, all at once: frame by frame here, each
    frame's leftover input would be copied again, a second's work for a megabyte of tiny
    frames on the event loop."""
    frame = _zstd.decompressor.decompressobj()
    content = frame.decompress(data)
    if not frame.eof:
        raise ValueError("the zstd frame is cut short")
    if frame.unused_data:
        return bytes(cramjam.zstd.decompress(bytes(data)))
    return content


def _lz4_frame(data: bytes | bytearray | memoryview) -> bytes:
    """The content of an LZ4 frame, whichever way its header checksum was computed: a frame
    is read as it is first, and again with the checksum recomputed only if that fails (Kafka's
    clients before KIP-57 computed it over the magic too, at magic 0). Recomputing it on every
    frame, as before, cost as much as decompressing a small batch. Anything but a frame (a
    skippable frame, which lz4 reads as empty) is refused, as Kafka refuses it."""
    if data[:4] != LZ4_MAGIC:
        raise ValueError("not an LZ4 frame")
    try:
        return lz4.frame.decompress(data)
    except RuntimeError:
        return lz4.frame.decompress(_with_header_checksum(bytes(data), broken=False))


def _xerial_snappy(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _unframe_snappy(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_HEADER[:8]:
        return bytes(cramjam.snappy.decompress_raw(view))
    position, parts = 16, []
    while position < len(view):
        if position + 4 > len(view):
            raise ValueError("truncated xerial block header")
        (length,) = struct.unpack_from(">i", view, position)
        position += 4
        if length < 0 or position + length > len(view):
            raise ValueError(f"xerial block of {length} bytes runs past the end")
        parts.append(bytes(cramjam.snappy.decompress_raw(view[position : position + length])))
        position += length
    return b"".join(parts)


def _with_header_checksum(frame: bytes, *, broken: bool) -> bytes:
    """The frame with its HC byte recomputed: Kafka's pre-KIP-57 way (over magic + descriptor)
    when ``broken``, else the LZ4 spec's way (over the descriptor only)."""
    if frame[:4] != LZ4_MAGIC or len(frame) < 7:
        raise ValueError("not an LZ4 frame")
    flags = frame[4]
    descriptor_end = 6
    if flags & LZ4_FLG_CONTENT_SIZE:
        descriptor_end += 8
    if flags & LZ4_FLG_DICT_ID:
        descriptor_end += 4
    if len(frame) <= descriptor_end:
        raise ValueError("truncated LZ4 frame descriptor")
    covered = frame[0 if broken else 4 : descriptor_end]
    checksum = (xxhash.xxh32_intdigest(covered) >> 8) & 0xFF
    return frame[:descriptor_end] + bytes((checksum,)) + frame[descriptor_end + 1 :]
