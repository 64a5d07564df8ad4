"""A partition's local segments, ordered by base offset (after Kafka's LogSegments)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from tidelog.log.segment import LogSegment


class LogSegments:
    """The local segments of one log, in increasing base offset; no two share a base offset.

    ``floor(o)`` is the segment with the largest base offset <= o (the one that would hold o),
    ``higher(o)`` the first with a base offset > o; each returns None when there is none. Indexing
    by position (``segments[0]``, ``segments[-1]``) and iteration go in base-offset order. The
    collection holds no lock of its own: the Log that owns it decides who may change it.
    """

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._segments: list[LogSegment] = []

    def add(self, segment: LogSegment) -> None:
        """Adds ``segment``; one with the same base offset is replaced."""
        base = segment.base_offset
        position = bisect_left(self._bases, base)
        if position < len(self._bases) and self._bases[position] == base:
            self._segments[position] = segment
        else:
            self._bases.insert(position, base)
            self._segments.insert(position, segment)

    def remove(self, segment: LogSegment) -> None:
        """Removes ``segment``; raises KeyError if it is not in the collection."""
        position = bisect_left(self._bases, segment.base_offset)
        if position == len(self._bases) or self._segments[position] is not segment:
            raise KeyError(f"{segment} is not among the segments")
        del self._bases[position]
        del self._segments[position]

    def clear(self) -> list[LogSegment]:
        """Removes every segment and returns them."""
        removed = self._segments
        self._bases, self._segments = [], []
        return removed

    def reset(self, segment: LogSegment) -> list[LogSegment]:
        """Replaces every segment by ``segment`` in one step (a reader on another thread never
        sees the collection empty); returns the ones replaced."""
        removed = self._segments
        self._segments = [segment]
        self._bases = [segment.base_offset]
        return removed

    def floor(self, offset: int) -> LogSegment | None:
        position = bisect_right(self._bases, offset) - 1
        return self._segments[position] if position >= 0 else None

    def higher(self, offset: int) -> LogSegment | None:
        position = bisect_right(self._bases, offset)
        return self._segments[position] if position < len(self._segments) else None

    def floor_position(self, offset: int) -> int:
        """The position of ``floor(offset)``, or 0 if every base offset is above it."""
        return max(0, bisect_right(self._bases, offset) - 1)

    def from_offset(self, offset: int) -> list[LogSegment]:
        """The segments that may hold ``offset`` or anything after it."""
        return self._segments[self.floor_position(offset) :]

    @property
    def base_offsets(self) -> list[int]:
        return list(self._bases)

    @property
    def first(self) -> LogSegment:
        return self._segments[0]

    @property
    def last(self) -> LogSegment:
        return self._segments[-1]

    def __getitem__(self, position: int) -> LogSegment:
        return self._segments[position]

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(list(self._segments))

    def __contains__(self, segment: object) -> bool:
        if not isinstance(segment, LogSegment):
            return False
        position = bisect_left(self._bases, segment.base_offset)
        return position < len(self._segments) and self._segments[position] is segment

    def __repr__(self) -> str:
        return f"LogSegments({self._bases})"
