"""Which leader epoch wrote which offsets of a partition (KIP-101), kept in
``leader-epoch-checkpoint`` beside the segments.

Message formats v0 and v1 carry no epoch, so the cache is kept by the broker: a leader records
the first offset it appends in each epoch, and a follower records the first offset it appends
while following the leader of an epoch. Truncation on becoming a follower asks the new leader
where the follower's latest epoch ended (OffsetsForLeaderEpoch) and cuts its log there, which
keeps every acknowledged message through repeated hard failures.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from pathlib import Path

CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """Entries (epoch, start offset), growing strictly in epoch and never shrinking in offset.

    end_offset_for(e) is the start offset of the first epoch after e, or the log end offset if
    e is the latest epoch; UNDEFINED_EPOCH_OFFSET if e is older than every entry (or the cache
    is empty), in which case a follower falls back to its high watermark.
    """

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / CHECKPOINT
        self.entries: list[tuple[int, int]] = self._read()

    def _read(self) -> list[tuple[int, int]]:
        if not self.path.exists():
            return []
        lines = self.path.read_text().split("\n")
        count = int(lines[1])
        entries = [tuple(map(int, line.split())) for line in lines[2 : 2 + count]]
        return [(epoch, offset) for epoch, offset in entries]

    def _write(self, sync: bool = True) -> None:
        """Replaces the file atomically; ``sync`` forces it to disk first, otherwise ``flush``
        does, later."""
        temporary = self.path.with_name(CHECKPOINT + ".tmp")
        lines = ["0", str(len(self.entries))] + [f"{e} {o}" for e, o in self.entries]
        with open(temporary, "w") as file:
            file.write("\n".join(lines) + "\n")
            file.flush()
            if sync:
                os.fsync(file.fileno())
        os.replace(temporary, self.path)
        self._unsynced = not sync

    _unsynced = False

    def flush(self) -> None:
        """Forces an epoch written by ``assign`` to disk (the log's flush calls it)."""
        if self._unsynced:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._unsynced = False

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Records that ``epoch`` starts at ``start_offset``, if it is newer than the latest."""
        if epoch <= self.latest_epoch:
            return
        if self.entries and start_offset < self.entries[-1][1]:
            raise ValueError(
                f"epoch {epoch} cannot start at {start_offset}, before epoch "
                f"{self.entries[-1][0]} at {self.entries[-1][1]}"
            )
        self.entries.append((epoch, start_offset))
        # Written, not synced: an append in a new epoch (each of a thousand partitions after a
        # leader change) must not wait for a disk; a killed process leaves the file in the page
        # cache, and the log's flush syncs it with the data it describes.
        self._write(sync=False)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> int:
        if not self.entries or epoch < self.entries[0][0]:
            return UNDEFINED_EPOCH_OFFSET
        if epoch >= self.latest_epoch:
            return log_end_offset
        following = bisect_right([e for e, _ in self.entries], epoch)
        return self.entries[following][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Forgets the epochs that start at or after ``end_offset`` (the log was cut there)."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forgets the offsets below ``start_offset`` (the log start moved up to it): of the
        epochs that start at or before it, only the latest is kept, starting there, as Kafka's
        truncateFromStart does. A follower whose latest epoch is older than every one kept is
        then answered UNDEFINED_EPOCH_OFFSET, and falls back to its high watermark."""
        earlier = [entry for entry in self.entries if entry[1] <= start_offset]
        if not earlier:
            return
        kept = [(earlier[-1][0], start_offset), *self.entries[len(earlier) :]]
        if kept != self.entries:
            self.entries = kept
            self._write()

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self._write()
