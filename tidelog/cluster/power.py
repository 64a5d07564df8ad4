"""A power loss of a broker's machine, after the fact: what the operating system had not yet
written to the disk is dropped from its log files.

The kernel knows which pages of a file are not yet on the disk: ``cachestat`` (Linux 6.5)
counts a range's dirty pages and pages under writeback. After the broker is killed (SIGKILL;
it writes its segments and indexes with pwrite, so nothing of theirs is left in its own memory),
each segment and index file is cut at a
page boundary chosen at random between its first page not on the disk and its end, the last such
page always lost: the pages before it survive (the broker flushed them, or the kernel wrote them
back on its own), and of the rest the page cache may have written some, in order, before the
power went. What a broker fsynced (``flush.messages``, a rolled segment's flush) is therefore
kept, and what it left to the page cache may go, as with LazyFS's "lose unsynced" fault.

What is not modelled: pages lost out of order (a hole inside a file), a file or rename whose
directory entry was not yet synced (a segment made since the last sync of its directory comes
back whole, or empty, not missing), the checkpoint files (written by rename after an fsync), and
a disk that lies about its cache.
"""

from __future__ import annotations

import ctypes
import os
import random
from dataclasses import dataclass
from pathlib import Path

from tidelog.log.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
SYS_CACHESTAT = 451  # the same number in x86_64's table and the generic one (arm64, riscv)
CUT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)


class _Range(ctypes.Structure):
    _fields_ = (("off", ctypes.c_uint64), ("len", ctypes.c_uint64))


class _CacheStat(ctypes.Structure):
    _fields_ = (
        ("nr_cache", ctypes.c_uint64),
        ("nr_dirty", ctypes.c_uint64),
        ("nr_writeback", ctypes.c_uint64),
        ("nr_evicted", ctypes.c_uint64),
        ("nr_recently_evicted", ctypes.c_uint64),
    )


_libc = ctypes.CDLL(None, use_errno=True)


def _unwritten_pages(fd: int, start: int, length: int) -> int:
    """Pages in [start, start+length) that are dirty or under writeback."""
    found = _CacheStat()
    wanted = _Range(start, length)
    if _libc.syscall(SYS_CACHESTAT, fd, ctypes.byref(wanted), ctypes.byref(found), 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"cachestat: {os.strerror(error)} (needs Linux 6.5 or later)")
    return found.nr_dirty + found.nr_writeback


def first_unwritten(path: Path) -> int | None:
    """The offset of the file's first page the kernel has not written to the disk, or None
    when every page is there (a binary search over cachestat's counts)."""
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        pages = -(-size // PAGE_SIZE)
        if pages == 0 or _unwritten_pages(fd, 0, pages * PAGE_SIZE) == 0:
            return None
        low, high = 0, pages - 1  # the first unwritten page is in [low, high]
        while low < high:
            middle = (low + high) // 2
            if _unwritten_pages(fd, 0, (middle + 1) * PAGE_SIZE):
                high = middle
            else:
                low = middle + 1
        return low * PAGE_SIZE
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Cut:
    """A file cut back by a power loss: its size before, and the size it kept."""

    path: str
    size: int
    kept: int


def lose_unwritten(log_dirs: list[Path], rng: random.Random) -> list[Cut]:
    """Cuts every segment and index file under ``log_dirs`` (of a broker that is no longer
    running) back to a random page boundary in its part not yet on the disk; returns the cuts."""
    cuts = []
    for log_dir in log_dirs:
        for path in sorted(log_dir.glob("*/*")):
            if path.suffix not in CUT_SUFFIXES or not path.is_file():
                continue
            first = first_unwritten(path)
            if first is None:
                continue
            size = path.stat().st_size
            unwritten_pages = -(-(size - first) // PAGE_SIZE)
            kept = first + rng.randrange(unwritten_pages) * PAGE_SIZE  # the last page goes
            os.truncate(path, kept)
            cuts.append(Cut(str(path), size, kept))
    return cuts
