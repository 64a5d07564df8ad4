"""The sparse map from timestamps to offsets inside one segment (``.timeindex``, KIP-33)."""

from __future__ import annotations

import struct
from bisect import bisect_left

from tidelog.log.index_file import CorruptIndexError, IndexFile


class TimeIndex(IndexFile):
    """Maps timestamps to offsets inside one segment.

    An entry (T, O) (timestamp int64, relative offset int32) says: T is the largest timestamp
    seen in this segment up to offset O, so every message with a timestamp greater than T comes
    after O. Entries grow strictly in offset and never shrink in timestamp; an entry is added only
    when the timestamp grew, except the final entry written at roll. One slot is always kept free
    for that final entry: the index counts as full one entry early.
    lookup(t) returns the last entry with timestamp < t, or (-1, base_offset) if there is none.
    """

    entry = struct.Struct(">qi")
    column_typecodes = ("q", "i")

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries - 1

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the newest entry, or (-1, base_offset) for an empty index."""
        if self._newest is None:
            return -1, self.base_offset
        timestamp, relative = self._newest
        return timestamp, self.base_offset + relative

    def entry_at(self, slot: int) -> tuple[int, int]:
        timestamp, relative = self._entry_at(slot)
        return timestamp, self.base_offset + relative

    def maybe_append(self, timestamp: int, offset: int, *, final: bool = False) -> bool:
        """Adds (timestamp, offset) if ``timestamp`` is larger than the last entry's.

        ``final`` is the entry written at roll: it may use the reserved slot and may repeat the
        last timestamp. Returns whether an entry was written.
        """
        last_timestamp, last_offset = self.last_entry
        if self.entries and offset <= last_offset:
            if timestamp <= last_timestamp:
                return False
            raise ValueError(
                f"time index entry ({timestamp}, {offset}) is not after the last offset "
                f"{last_offset} in {self.path}"
            )
        if timestamp < last_timestamp or (timestamp == last_timestamp and not final):
            return False
        if not final and self.is_full:
            raise IndexError(f"{self.path} is full ({self.entries} entries)")
        relative = offset - self.base_offset
        if not 0 <= relative <= 2**31 - 1:
            raise ValueError(f"offset {offset} is out of range for base {self.base_offset}")
        self._write(timestamp, relative)
        return True

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The last entry whose timestamp is < ``timestamp``: a search for the first message at
        or after ``timestamp`` may start at its offset."""
        slot = self._search(timestamp, bisect_left) - 1
        if slot < 0:
            return -1, self.base_offset
        return self._columns()[slot], self.base_offset + self._values[slot]

    def truncate_to(self, offset: int) -> None:
        """Removes every entry for an offset >= ``offset``."""
        keep = self.entries
        while keep and self.entry_at(keep - 1)[1] >= offset:
            keep -= 1
        self.truncate_to_entries(keep)

    def sanity_check(self) -> None:
        if not self.entries:
            return
        timestamp, offset = self.last_entry
        if offset < self.base_offset:
            raise CorruptIndexError(f"{self.path}: last entry offset {offset} is below the base")
        if self.entries > 1:
            previous_timestamp, previous_offset = self.entry_at(self.entries - 2)
            if previous_timestamp > timestamp or previous_offset >= offset:
                raise CorruptIndexError(f"{self.path}: the last two entries are out of order")
