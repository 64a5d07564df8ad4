"""The preallocated index file both index kinds are built on.

A new index file is preallocated (sparse) to the largest multiple of the entry size that fits in
``max_index_size`` when its first entry is written: a new segment (a thousand of them for a new
topic) creates no index file until then, or until it is trimmed. Entries are written in order
from the start; unused slots stay zero (truncation zeroes the slots it frees), so after a crash
the entries are the prefix of non-empty slots. ``trim`` shrinks the file to its entries (on roll
and clean shutdown); ``resize`` grows it back when a trimmed segment becomes active again.

Entries are written with ``pwrite`` through a descriptor held only while the index is being
written; ``release`` closes it (the log manager does so for idle indexes) and the next write
opens it again. Kafka memory-maps its indexes; here the first write to each page of a mapping
cost 40 to 140 ms on a busy ext4 disk (the fault waits for the journal), against 0.01 to 0.4 ms
for ``pwrite``, and a thousand partitions' first entries stalled a broker for a minute.
A flush (the log's background thread) and a read of the entries (a remote copy's or a
reader's thread) borrow that descriptor if it is open, and otherwise open one of their own. A
release while it is borrowed leaves the close to the last borrower (``_loans``): closed under
them, its number could be taken by any file the broker opens next (a segment being served, a
socket), and they would read it, or close it a second time. Nobody waits: the writer (the
event loop) never blocks behind another thread's fsync.
Lookups search in-memory copies of the two columns (``array``s of keys and values), read with
one ``pread`` on first use and kept in step with appends and truncations; the file is the
durable truth. The newest entry, which every append and roll checks, is read when the index is
opened and kept since: appends only write (Kafka's, to its mappings, read nothing either), so a
disk whose reads fail does not fail an append, which halts a broker. An index that is only
searched (every rolled segment's) holds no descriptor, so open files grow with the segments
being written, not with all segments. Entries are written every index.interval.bytes, so keys
grow nearly linearly with the slot: a lookup guesses the slot by interpolation and bisects a
small window around the guess, and bisects the whole column only when the key is not inside
that window.
"""

from __future__ import annotations

import os
import struct
import threading
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class _DescriptorLoans:
    """Descriptors lent to other threads, process-wide (descriptor numbers are): how many
    borrowers each has, and which were released meanwhile, to close when the last one is
    given back. Its lock is held only to count, never across I/O."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._borrowers: dict[int, int] = {}
        self._released: set[int] = set()

    def borrow(self, index: IndexFile) -> int:
        """The index's descriptor, lent until ``give_back``; -1 if it has none open."""
        with self._lock:
            fd = index._fd
            if fd >= 0:
                self._borrowers[fd] = self._borrowers.get(fd, 0) + 1
            return fd

    def give_back(self, fd: int) -> None:
        with self._lock:
            left = self._borrowers.pop(fd) - 1
            if left:
                self._borrowers[fd] = left
                return
            if fd not in self._released:
                return
            self._released.discard(fd)
        os.close(fd)

    def release(self, index: IndexFile) -> None:
        """Takes the index's descriptor away; closes it now, or once the last borrower gives
        it back."""
        with self._lock:
            fd, index._fd = index._fd, -1
            if fd < 0:
                return
            if fd in self._borrowers:
                self._released.add(fd)
                return
        os.close(fd)


_loans = _DescriptorLoans()


class CorruptIndexError(Exception):
    """An index file does not agree with itself or with its log; it is rebuilt from the log."""


INTERPOLATION_WINDOW = 16


class IndexFile:
    entry: struct.Struct  # set by subclasses: (key, value), the key is what lookups search
    column_typecodes: tuple[str, str]

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._closed = False
        self._fd = -1  # open while the index is being written
        self.recently_written = False  # written since the last idle check (release_if_idle)
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
            # an empty (or absent) file has no entries; it gets its slots on the first write
            self._length = length or self._rounded(max_index_size)
            self.max_entries = self._length // self.entry.size
            self.entries = self._count_entries(fd) if length else 0
            # (key, value) of the newest entry, None for an empty index; kept, never read again
            self._newest: tuple[int, int] | None = (
                self._read_slot(fd, self.entries - 1) if self.entries else None
            )
        finally:
            if fd >= 0:
                os.close(fd)
        self._keys: array | None = None
        self._values: array = array("i")

    # -- sizes ---------------------------------------------------------------------------------

    def _rounded(self, size: int) -> int:
        return max(size // self.entry.size, 2) * self.entry.size

    def _writable(self) -> int:
        """The descriptor writes go through, opened on first use (the file made then if it is
        new, and preallocated if it is new or make_file made it empty)."""
        if self._fd < 0:
            if self._closed or not self._length:
                raise ValueError(f"{self.path}: the index is closed or has no slots")
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(fd).st_size != self._length:
                os.ftruncate(fd, self._length)
            self._fd = fd
        return self._fd

    def make_file(self) -> None:
        """Makes the index's file, empty, if it has none yet. A new segment's
        log has this done on its background thread, ahead of the first write, which otherwise
        makes the file on the event loop (0.3-0.5 ms on this ext4 disk, against 0.05 ms to
        open an existing file and give it its slots). The file is made, never sized, here: a
        roll's trim or a truncation's resize on the loop at the same moment is never undone,
        whichever comes first (O_EXCL: an existing file is left as it is). Safe from any
        thread; at worst an empty file is left where the index was closed meanwhile, which
        the next write sizes or the next load removes with its segment."""
        if self._closed or self._fd >= 0:
            return
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except (FileExistsError, FileNotFoundError):  # made already, or its directory is gone
            return

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.entry.size

    def _slot(self, fd: int, slot: int) -> bytes:
        return os.pread(fd, self.entry.size, slot * self.entry.size)

    def _slot_is_empty(self, fd: int, slot: int) -> bool:
        data = self._slot(fd, slot)
        return data.count(0) == len(data)

    def _read_slot(self, fd: int, slot: int) -> tuple[int, int]:
        key, value = self.entry.unpack(self._slot(fd, slot))
        return key, value

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
            return
        with self._descriptor(os.O_RDWR | os.O_CREAT) as fd:
            os.ftruncate(fd, length)
        self._length = length
        self.max_entries = length // self.entry.size

    def release(self) -> None:
        """Closes the descriptor writes go through; the next write opens it again. Entries
        and lookups are unaffected, and ``flush`` still forces written entries to disk."""
        _loans.release(self)

    def release_if_idle(self) -> bool:
        """Releases the index if it was not written since the last call; True if it did."""
        if self._fd < 0:
            return False
        if self.recently_written:
            self.recently_written = False
            return False
        self.release()
        return True

    @contextmanager
    def _descriptor(self, flags: int = os.O_RDONLY) -> Iterator[int]:
        """The writer's descriptor, borrowed, or one opened with ``flags`` for the call (see
        the module docstring)."""
        fd = _loans.borrow(self)
        if fd >= 0:
            try:
                yield fd
            finally:
                _loans.give_back(fd)
            return
        fd = os.open(self.path, flags, 0o644)
        try:
            yield fd
        finally:
            os.close(fd)

    # -- entries -------------------------------------------------------------------------------

    def _entry_at(self, slot: int) -> tuple[int, int]:
        keys = self._keys if self._keys is not None else self._columns()
        return keys[slot], self._values[slot]

    def _write(self, key: int, value: int) -> None:
        if self.entries >= self.max_entries:
            raise IndexError(f"{self.path} is full ({self.entries} entries)")
        position = self.entries * self.entry.size
        os.pwrite(self._writable(), self.entry.pack(key, value), position)
        self.recently_written = self._dirty = True
        if self._keys is not None:
            self._keys.append(key)
            self._values.append(value)
        self.entries, self._newest = self.entries + 1, (key, value)

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
        with self._descriptor() as fd:
            data = os.pread(fd, size, 0)
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
        newest = self._entry_at(count - 1) if count else None
        start, end = count * self.entry.size, self.entries * self.entry.size
        os.pwrite(self._writable(), bytes(end - start), start)  # an error here changes nothing
        self.recently_written = self._dirty = True
        self.entries, self._newest = count, newest
        if self._keys is not None:
            del self._keys[count:]
            del self._values[count:]

    def reset(self) -> None:
        self.truncate_to_entries(0)

    # -- life cycle ----------------------------------------------------------------------------

    def flush(self) -> None:
        if self._dirty and not self._closed:
            try:
                with self._descriptor() as fd:
                    os.fsync(fd)
            except FileNotFoundError:
                if not self._closed:
                    raise  # deleted meanwhile (a truncation right after a roll): nothing to flush
        self._dirty = False

    def close(self) -> None:
        self.release()
        self._closed = True

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        if self._fd >= 0 or self.path.exists():
            os.rename(self.path, path)
        self.path = path
