"""The sparse map from offsets to file positions inside one segment (``.index``)."""

from __future__ import annotations

import struct
from bisect import bisect_left

from tidelog.log.index_file import CorruptIndexError, IndexFile


class OffsetIndex(IndexFile):
    """Maps offsets to positions in one segment's ``.log`` file.

    An entry (relative offset int32, position int32) says: the entry holding offset
    base_offset + relative starts at that position, so a reader looking for offset O can start
    at the position of the last entry whose offset is <= O. Entries grow strictly in both fields.
    Position 0 is never indexed (the first batch of a segment gets no entry), which lets an
    empty slot be told from an entry. lookup(o) returns (base_offset, 0) when no entry is <= o.
    """

    entry = struct.Struct(">ii")
    column_typecodes = ("i", "i")

    def append(self, offset: int, position: int) -> None:
        """Adds (offset, position); both must be larger than the last entry's."""
        relative = offset - self.base_offset
        if not 0 <= relative <= 2**31 - 1:
            raise ValueError(f"offset {offset} is out of range for base {self.base_offset}")
        if self._newest is not None:
            last_relative, last_position = self._newest
            if relative <= last_relative or position <= last_position:
                raise ValueError(
                    f"index entry ({offset}, {position}) is not after the last entry "
                    f"({self.base_offset + last_relative}, {last_position}) in {self.path}"
                )
        self._write(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry whose offset is <= ``offset``."""
        slot = self._search(offset - self.base_offset) - 1
        if slot < 0:
            return self.base_offset, 0
        return self.base_offset + self._columns()[slot], self._values[slot]

    def entry_at(self, slot: int) -> tuple[int, int]:
        relative, position = self._entry_at(slot)
        return self.base_offset + relative, position

    @property
    def last_entry(self) -> tuple[int, int]:
        if self._newest is None:
            return self.base_offset, 0
        relative, position = self._newest
        return self.base_offset + relative, position

    def truncate_to(self, offset: int) -> None:
        """Removes every entry for an offset >= ``offset``."""
        self.truncate_to_entries(self._search(offset - self.base_offset, bisect_left))

    def sanity_check(self, log_size: int) -> None:
        if not self.entries:
            return
        offset, position = self.last_entry
        if offset < self.base_offset or position >= log_size:
            raise CorruptIndexError(
                f"{self.path}: last entry ({offset}, {position}) is outside the segment "
                f"(base {self.base_offset}, log size {log_size})"
            )
        if self.entries > 1:
            previous_offset, previous_position = self.entry_at(self.entries - 2)
            if previous_offset >= offset or previous_position >= position:
                raise CorruptIndexError(f"{self.path}: the last two entries are out of order")
