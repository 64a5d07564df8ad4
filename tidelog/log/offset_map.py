"""The log cleaner's offset map: key MD5 -> latest offset, in one fixed buffer (Kafka's
SkimpyOffsetMap)."""

from __future__ import annotations

import ctypes
import hashlib
import struct
from collections.abc import Iterable
from types import ModuleType

native: ModuleType | None
try:  # the cleaner's C loops and this map's probe, built by make install (setup.py)
    import tidelog.log._entry_walk as native
except ImportError:  # a source tree nobody built: the Python loops do the same
    native = None

HASH_BYTES = 16  # MD5
SLOT = struct.Struct(">16sq")  # key hash, offset
SLOT_OFFSET = struct.Struct(">q")  # the offset, 16 bytes into a slot
EMPTY_HASH = bytes(HASH_BYTES)
# Keys whose latest offset ``get`` remembers (a clean looks up each key of the log once per
# message): past this many the memory starts again, so it stays small beside the buffer.
REMEMBERED_KEYS = 1 << 16
# The most offsets mark_latest marks per slot of the map: its bits then take at most a twelfth
# of the map's memory. A clean maps no more offsets than the map has room for keys, but for the
# first segment, which it maps in any case.
MARKS_PER_SLOT = 16


class OffsetMapFull(Exception):
    """A put of a new key into a map already holding ``capacity`` keys."""


class OffsetMap:
    """Maps a key's MD5 to the largest offset put for it, in a buffer of ``memory`` bytes.

    The buffer holds ``slots`` = memory // 24 slots of (hash, offset), addressed openly: a key
    goes to the slot its hash names (its first eight bytes, mod slots) or, if that holds another
    hash, the next free one after it (linear probing). An all-zero hash marks an empty slot
    (an MD5 of zero is not expected). The map is full at ``capacity`` = slots * load_factor
    keys; ``put`` of a new key then raises OffsetMapFull (the cleaner stops its pass at the
    segment before). Two keys with the same MD5 are one key, as in Kafka. ``get`` of an absent
    key returns -1.

    ``get`` remembers the answers for up to REMEMBERED_KEYS keys (by the key itself, so no MD5
    is computed again); any put or clear forgets them.

    ``mark_latest`` notes, one bit an offset, which offsets of a range the map holds as some
    key's latest, so that ``holds_latest`` answers for a batch from its offsets alone; any put
    or clear forgets the marks.
    """

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        if not 0 < load_factor <= 1:
            raise ValueError(f"load factor {load_factor} is not in (0, 1]")
        self.slots = memory // SLOT.size
        if self.slots < 1:
            raise ValueError(f"an offset map of {memory} bytes holds no {SLOT.size}-byte slot")
        self.capacity = max(1, int(self.slots * load_factor))
        self.buffer = bytearray(self.slots * SLOT.size)
        self.size = 0
        self.latest_offset = -1
        self.lookups = 0
        self.probes = 0
        self.remembered: dict[bytes, int] = {}
        self.marks: bytearray | None = None  # bit o - marked_from: offset o is a key's latest
        self.marked_from = self.marked_to = 0

    def clear(self) -> None:
        # Zeros written over the buffer in place, as Kafka's clear does: a new bytearray is
        # zeroed too (CPython writes its zeros) and, allocated while the old one lives, on
        # fresh pages, each faulted in: 110-220 ms for 128 MB on this machine against 25 ms.
        ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(self.buffer)), 0, len(self.buffer))
        self.size = 0
        self.latest_offset = -1
        self.lookups = self.probes = 0
        self.remembered.clear()
        self.marks = None

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    @staticmethod
    def hash_of(key: bytes | memoryview) -> bytes:
        return hashlib.md5(key, usedforsecurity=False).digest()

    def _find(self, digest: bytes) -> tuple[int, bool]:
        """(byte position of the slot holding ``digest`` or of the free slot it would take,
        whether it holds it); position -1 when every slot holds another hash (a load factor
        of 1 lets the map fill up)."""
        slot = int.from_bytes(digest[:8], "big") % self.slots
        buffer = self.buffer
        self.lookups += 1
        for _ in range(self.slots):
            position = slot * SLOT.size
            if buffer.startswith(digest, position):
                return position, True
            if buffer.startswith(EMPTY_HASH, position):
                return position, False
            self.probes += 1
            slot = slot + 1 if slot + 1 < self.slots else 0
        return -1, False

    def put(self, key: bytes | memoryview, offset: int) -> None:
        """Records ``offset`` as the latest for ``key`` (offsets are put in increasing order)."""
        self.remembered.clear()
        self.marks = None
        digest = self.hash_of(key)
        position, found = self._find(digest)
        if not found:
            if self.size >= self.capacity:
                raise OffsetMapFull(f"the offset map holds its {self.capacity} keys")
            self.size += 1
        SLOT.pack_into(self.buffer, position, digest, offset)
        self.latest_offset = offset

    def put_all(self, latest: dict[bytes, int]) -> None:
        """``put`` of every key with its offset, in one pass. The offsets must all be above any
        put before (``latest`` holds the next stretch of a log, each key with its last offset
        there); two keys of one MD5 keep the larger offset, as putting them in offset order
        does. Raises OffsetMapFull at the first new key past ``capacity``."""
        if not latest:
            return
        self.remembered.clear()
        self.marks = None
        if native is not None:
            md5 = hashlib.md5
            put, self.size, probes = native.put_digests(
                self.buffer,
                self.slots,
                self.capacity,
                self.size,
                [md5(key, usedforsecurity=False).digest() for key in latest],
                list(latest.values()),
            )
            self.lookups += len(latest)
            self.probes += probes
            if put < len(latest):
                raise OffsetMapFull(f"the offset map holds its {self.capacity} keys")
            self.latest_offset = max(self.latest_offset, max(latest.values()))
            return
        buffer, slots, slot_size = self.buffer, self.slots, SLOT.size
        md5, from_bytes, pack_slot = hashlib.md5, int.from_bytes, SLOT.pack_into
        stored_offset, pack_offset = SLOT_OFFSET.unpack_from, SLOT_OFFSET.pack_into
        size, capacity, probes = self.size, self.capacity, 0
        try:
            for key, offset in latest.items():
                digest = md5(key, usedforsecurity=False).digest()
                slot = from_bytes(digest[:8], "big") % slots
                for _ in range(slots):
                    position = slot * slot_size
                    if buffer.startswith(digest, position):
                        if stored_offset(buffer, position + HASH_BYTES)[0] < offset:
                            pack_offset(buffer, position + HASH_BYTES, offset)
                        break
                    if buffer.startswith(EMPTY_HASH, position):
                        if size >= capacity:
                            raise OffsetMapFull(f"the offset map holds its {capacity} keys")
                        size += 1
                        pack_slot(buffer, position, digest, offset)
                        break
                    probes += 1
                    slot = slot + 1 if slot + 1 < slots else 0
                else:  # every slot holds another hash
                    raise OffsetMapFull(f"the offset map holds its {capacity} keys")
        finally:
            self.size = size
            self.lookups += len(latest)
            self.probes += probes
        self.latest_offset = max(self.latest_offset, max(latest.values()))

    def get(self, key: bytes | memoryview) -> int:
        remembered = self.remembered.get(key) if type(key) is bytes else None
        if remembered is not None:
            return remembered
        position, found = self._find(self.hash_of(key))
        latest = SLOT_OFFSET.unpack_from(self.buffer, position + HASH_BYTES)[0] if found else -1
        if type(key) is bytes:
            if len(self.remembered) >= REMEMBERED_KEYS:
                self.remembered.clear()
            self.remembered[key] = latest
        return latest

    def remember(self, keys: Iterable[bytes]) -> None:
        """Looks up every one of ``keys`` that ``get`` does not remember yet, in one pass (the
        MD5s in a list, the probes in C), so that ``get`` answers them from memory; without the
        C probe, nothing (``get`` looks each up when asked)."""
        if native is None:
            return
        remembered = self.remembered
        missing = [key for key in keys if key not in remembered]
        if not missing:
            return
        if len(remembered) + len(missing) > REMEMBERED_KEYS:
            remembered.clear()
        md5 = hashlib.md5
        digests = [md5(key, usedforsecurity=False).digest() for key in missing]
        offsets = native.get_digests(self.buffer, self.slots, digests)
        remembered.update(zip(missing, offsets, strict=True))
        self.lookups += len(missing)

    def mark_latest(self, start: int, end: int) -> None:
        """Marks which offsets in [start, end) the map holds as a key's latest (the cleaner
        marks the dirty section it has just mapped). Nothing is marked without the C loops, or
        for a range of more than MARKS_PER_SLOT bits a slot (a sparse, compacted stretch of
        offsets), where the marks would outgrow the map."""
        self.marks = None
        if native is None or not 0 < end - start <= self.slots * MARKS_PER_SLOT:
            return
        marks = bytearray((end - start + 7) // 8)
        native.mark_latest(self.buffer, self.slots, start, marks)
        self.marks, self.marked_from, self.marked_to = marks, start, end

    def holds_latest(self, first: int, last: int) -> bool:
        """Whether an offset in [first, last] may be a key's latest: False only when the range
        lies within the marked one and none of its offsets is marked."""
        marks, start = self.marks, self.marked_from
        if marks is None or first < start or last >= self.marked_to or last < first:
            return True
        low, high = first - start, last - start
        window = int.from_bytes(marks[low >> 3 : (high >> 3) + 1], "little") >> (low & 7)
        return window & ((1 << (high - low + 1)) - 1) != 0

    def has_room_for(self, new_keys: int) -> bool:
        return self.size + new_keys <= self.capacity
