"""How a partition's files are named: the one place that spells a segment's file name."""

from __future__ import annotations

from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
# Added after a segment file's own suffix while the log cleaner swaps segments.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"


def segment_name(base_offset: int, suffix: str) -> str:
    """``{base_offset:020d}{suffix}``, as Kafka names a segment's files."""
    return f"{base_offset:020d}{suffix}"


def segment_file(directory: Path, base_offset: int, suffix: str) -> Path:
    """The file of the segment starting at ``base_offset`` with ``suffix`` in ``directory``."""
    return directory / segment_name(base_offset, suffix)


def base_offset_of(path: Path) -> int:
    """The base offset a segment file's name carries; ValueError for any other name."""
    stem = path.name.split(".", 1)[0]
    if not stem.isdigit():
        raise ValueError(f"{path}: not a segment file name (expected a 20-digit base offset)")
    return int(stem)


def segment_files(directory: Path, suffix: str = LOG_SUFFIX) -> list[Path]:
    """The files with ``suffix`` in ``directory`` named like segments, by base offset."""
    found = []
    for path in directory.glob(f"*{suffix}"):
        try:
            found.append((base_offset_of(path), path))
        except ValueError:
            continue
    return [path for _, path in sorted(found)]
