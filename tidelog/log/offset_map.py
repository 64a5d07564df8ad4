"""The log cleaner's offset map: key MD5 -> latest offset, in one fixed buffer (Kafka's
SkimpyOffsetMap)."""

from __future__ import annotations

import hashlib
import struct

HASH_BYTES = 16  # MD5
SLOT = struct.Struct(">16sq")  # key hash, offset
EMPTY_HASH = bytes(HASH_BYTES)


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

    def clear(self) -> None:
        self.buffer[:] = bytes(len(self.buffer))
        self.size = 0
        self.latest_offset = -1
        self.lookups = self.probes = 0

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    @staticmethod
    def hash_of(key: bytes | memoryview) -> bytes:
        return hashlib.md5(key, usedforsecurity=False).digest()

    def _find(self, digest: bytes) -> tuple[int, bool]:
        """(byte position of the slot holding ``digest`` or of the free slot it would take,
        whether it holds it)."""
        slot = int.from_bytes(digest[:8], "big") % self.slots
        buffer = self.buffer
        self.lookups += 1
        while True:
            position = slot * SLOT.size
            stored = buffer[position : position + HASH_BYTES]
            if stored == digest:
                return position, True
            if stored == EMPTY_HASH:
                return position, False
            self.probes += 1
            slot = slot + 1 if slot + 1 < self.slots else 0

    def put(self, key: bytes | memoryview, offset: int) -> None:
        """Records ``offset`` as the latest for ``key`` (offsets are put in increasing order)."""
        digest = self.hash_of(key)
        position, found = self._find(digest)
        if not found:
            if self.size >= self.capacity:
                raise OffsetMapFull(f"the offset map holds its {self.capacity} keys")
            self.size += 1
        SLOT.pack_into(self.buffer, position, digest, offset)
        self.latest_offset = offset

    def get(self, key: bytes | memoryview) -> int:
        position, found = self._find(self.hash_of(key))
        return SLOT.unpack_from(self.buffer, position)[1] if found else -1

    def has_room_for(self, new_keys: int) -> bool:
        return self.size + new_keys <= self.capacity
