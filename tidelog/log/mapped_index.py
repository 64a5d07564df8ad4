"""The memory-mapped file both index kinds are built on.

A new index file is preallocated to the largest multiple of the entry size that fits in
``max_index_size`` and memory-mapped when its first entry is written: a new segment (a thousand
of them for a new topic) creates no index file until then, or until it is trimmed. Entries are
written in order from the start; unused slots stay zero (truncation zeroes the slots it frees),
so after a crash the entries are the prefix of non-empty slots. ``trim`` shrinks the file to
its entries (on roll and clean shutdown); ``resize`` grows it back when a trimmed segment
becomes active again.

The file is mapped lazily, on the first write, and holds no descriptor otherwise: reads go to
the in-memory columns (filled with one ``pread``), so an index that is only searched (every
rolled segment's) costs no open file and no mapping. ``unmap`` closes the mapping of an index
that is not being written (the log manager does so for idle segments); the next write maps it
again. Open files thus grow with the segments being written, not with all segments.

Lookups search in-memory copies of the two columns (``array``s of keys and values), built on
first use and kept in step with appends and truncations; the mmap is the durable truth. Entries
are written every index.interval.bytes, so keys grow nearly linearly with the slot: a lookup
guesses the slot by interpolation and bisects a small window around the guess, and bisects the
whole column only when the key is not inside that window.
"""

from __future__ import annotations

import mmap
import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path


class CorruptIndexError(Exception):
    """An index file does not agree with itself or with its log; it is rebuilt from the log."""


INTERPOLATION_WINDOW = 16


class MappedIndex:
    entry: struct.Struct  # set by subclasses: (key, value), the key is what lookups search
    column_typecodes: tuple[str, str]

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._closed = False
        self._map: mmap.mmap | None = None
        self.recently_written = False  # written since the last idle check (unmap_if_idle)
        self._dirty = False  # written since the last flush
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            fd = -1  # a new index: its file is made by the first write, or by trim
        try:
            length = os.fstat(fd).st_size if fd >= 0 else 0
            if length % self.entry.size:
                raise CorruptIndexError(
                    f"{path}: size {length} is not a multiple of the entry size {self.entry.size}"
                )
            # an empty (or absent) file has no entries; it gets its slots when it is mapped
            self._length = length or self._rounded(max_index_size)
            self.max_entries = self._length // self.entry.size
            self.entries = self._count_entries(fd) if length else 0
        finally:
            if fd >= 0:
                os.close(fd)
        self._keys: array | None = None
        self._values: array = array("i")

    # -- sizes ---------------------------------------------------------------------------------

    def _rounded(self, size: int) -> int:
        return max(size // self.entry.size, 2) * self.entry.size

    @property
    def _mapped(self) -> mmap.mmap:
        """The mapping, made on first use; an index with no slots (or closed) has none."""
        if self._map is None:
            if self._closed or not self._length:
                raise ValueError(f"{self.path}: the index is closed or has no slots")
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size != self._length:
                    os.ftruncate(fd, self._length)  # a new file: preallocated now
                self._map = mmap.mmap(fd, self._length)  # the mapping holds its own descriptor
            finally:
                os.close(fd)
        return self._map

    @property
    def is_mapped(self) -> bool:
        return self._map is not None

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.entry.size

    def _slot_is_empty(self, fd: int, slot: int) -> bool:
        data = os.pread(fd, self.entry.size, slot * self.entry.size)
        return data.count(0) == len(data)

    def _count_entries(self, fd: int) -> int:
        """The number of entries: the slots before the first empty one (they form a prefix).
        The search stays before the file's first hole (never-written space, all zeros):
        reading there costs a page fault per probe, a minute for a broker loading a thousand
        logs."""
        low, high = 0, self.max_entries
        try:
            written = os.lseek(fd, 0, os.SEEK_HOLE)
        except OSError:  # no hole information here: search the whole file
            written = high * self.entry.size
        high = min(high, -(-written // self.entry.size))
        while low < high:
            middle = (low + high) // 2
            if self._slot_is_empty(fd, middle):
                high = middle
            else:
                low = middle + 1
        return low

    def trim(self) -> None:
        """Shrinks the file to exactly its entries."""
        self._set_length(self.size_in_bytes)

    def resize(self, max_index_size: int) -> None:
        """Makes room for entries up to ``max_index_size`` bytes (never dropping an entry)."""
        self._set_length(max(self._rounded(max_index_size), self.size_in_bytes))

    def _set_length(self, length: int) -> None:
        if length == self._length:
            return  # already so: no flush of a mapping that has not changed size
        self.unmap()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, length)
        finally:
            os.close(fd)
        self._length = length
        self.max_entries = length // self.entry.size

    def unmap(self) -> None:
        """Closes the mapping (and the descriptor it holds); the next write maps the file
        again. Entries and lookups are unaffected; written pages stay in the page cache, and
        ``flush`` still forces them to disk."""
        if self._map is not None:
            self._map.close()
            self._map = None

    def unmap_if_idle(self) -> bool:
        """Unmaps the index if it was not written since the last call; True if it did."""
        if self._map is None:
            return False
        if self.recently_written:
            self.recently_written = False
            return False
        self.unmap()
        return True

    # -- entries -------------------------------------------------------------------------------

    def _entry_at(self, slot: int) -> tuple[int, int]:
        keys = self._keys if self._keys is not None else self._columns()
        return keys[slot], self._values[slot]

    def _write(self, key: int, value: int) -> None:
        if self.entries >= self.max_entries:
            raise IndexError(f"{self.path} is full ({self.entries} entries)")
        self.entry.pack_into(self._mapped, self.entries * self.entry.size, key, value)
        self.recently_written = self._dirty = True
        if self._keys is not None:
            self._keys.append(key)
            self._values.append(value)
        self.entries += 1

    def _columns(self) -> array:
        """The key column (and with it the value column), built on first use."""
        if self._keys is None:
            key_code, value_code = self.column_typecodes
            pairs = list(self.entry.iter_unpack(self._read_entries()))
            self._keys = array(key_code, [key for key, _ in pairs])
            self._values = array(value_code, [value for _, value in pairs])
        return self._keys

    def _read_entries(self) -> bytes:
        size = self.size_in_bytes
        if not size:
            return b""
        if self._map is not None:
            return self._map[:size]
        fd = os.open(self.path, os.O_RDONLY)
        try:
            data = os.pread(fd, size, 0)
        finally:
            os.close(fd)
        if len(data) != size:
            raise CorruptIndexError(f"{self.path}: {len(data)} bytes where {size} were expected")
        return data

    def _search(self, key: int, search=bisect_right, window: int = INTERPOLATION_WINDOW) -> int:
        """What ``search`` (bisect_right: entries with a key <= ``key``; bisect_left: entries
        with a key < ``key``) says over the whole key column."""
        keys = self._keys if self._keys is not None else self._columns()
        count = len(keys)
        if count > 2 * window:
            first, last = keys[0], keys[count - 1]
            if first < key < last:
                guess = (key - first) * (count - 1) // (last - first)
                low = guess - window if guess > window else 0
                high = guess + window if guess + window < count else count - 1
                # Strictly inside the window, the answer is the same as over the whole column.
                if keys[low] < key < keys[high]:
                    return search(keys, key, low, high)
        return search(keys, key)

    def truncate_to_entries(self, count: int) -> None:
        """Keeps the first ``count`` entries and zeroes the slots after them."""
        if count >= self.entries:
            return
        start, end = count * self.entry.size, self.entries * self.entry.size
        self._mapped[start:end] = bytes(end - start)
        self.recently_written = self._dirty = True
        self.entries = count
        if self._keys is not None:
            del self._keys[count:]
            del self._values[count:]

    def reset(self) -> None:
        self.truncate_to_entries(0)

    # -- life cycle ----------------------------------------------------------------------------

    def flush(self) -> None:
        if self._map is not None:
            self._map.flush()
        elif self._dirty and not self._closed:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._dirty = False

    def close(self) -> None:
        self.unmap()
        self._closed = True

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        if self.path.exists() or self._map is not None:
            os.rename(self.path, path)
        self.path = path
