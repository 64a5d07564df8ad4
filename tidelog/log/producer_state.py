"""What a partition knows of its idempotent producers (KIP-98), as Kafka 2.1's
ProducerStateManager keeps it, and the ``.snapshot`` files it is saved in.

Per producer id: its epoch and the sequence/offset metadata of its last 5 batches (the most a
producer has in flight), with the timestamp of its last one. A leader checks every batch of a
producer against it in the append, under the log's lock, after offsets are assigned and before
anything is written: a batch that repeats one of the 5 is a duplicate (answered with its first
offset, nothing appended); one from an older epoch is INVALID_PRODUCER_EPOCH; one whose
sequence does not follow is OUT_OF_ORDER_SEQUENCE_NUMBER, or UNKNOWN_PRODUCER_ID when the
partition has no record of the producer (expired, or truncated away by retention), so that
the client can tell by the log start offset whether it lost its state or its data. Followers
and a rebuild from the log apply batches without checks.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from tidelog.errors import ErrorCode, KafkaError
from tidelog.log.files import DELETED_SUFFIX, segment_file
from tidelog.records.format import OFFSET_AND_SIZE
from tidelog.records.record_batch import HEADER_SIZE, LAST_OFFSET_DELTA_AT, MAGIC, MAGIC_AT

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NumBatchesToRetain
NO_SEQUENCE = -1
NO_EPOCH = -1
INT32_MAX = 2**31 - 1
# a batch header from its last offset delta: delta, first timestamp, max timestamp, producer
# id, producer epoch, base sequence (the hot path reads these six and nothing else)
PRODUCER_FIELDS = struct.Struct(">iqqqhi")
# the snapshot: version:int16 crc:uint32 (CRC-32C of what follows) count:int32, then per producer
# id producer_id:int64 epoch:int16 last_sequence:int32 last_offset:int64 offset_delta:int32
# timestamp:int64 coordinator_epoch:int32 current_txn_first_offset:int64
SNAPSHOT_HEADER = struct.Struct(">hIi")
SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
ENTRIES_AT = 6  # where the CRC starts


class CorruptSnapshotError(Exception):
    """A snapshot file that cannot be read (version, CRC, length): it is deleted and the state
    rebuilt from an older one and the log."""


@dataclass(frozen=True, slots=True)
class DuplicateBatch:
    """A batch already in the log: the offsets and timestamp it was appended with."""

    first_offset: int
    last_offset: int
    timestamp: int


class ProducerStateEntry:
    """One producer id's state in one partition: ``epoch`` and up to BATCHES_TO_RETAIN
    (first sequence, last sequence, last offset, max timestamp) of its latest batches, oldest
    first. A batch of a new epoch clears the older epoch's batches."""

    __slots__ = ("batches", "epoch", "producer_id")

    def __init__(self, producer_id: int, epoch: int = NO_EPOCH) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[tuple[int, int, int, int]] = deque(maxlen=BATCHES_TO_RETAIN)

    def add(self, epoch: int, first_seq: int, last_seq: int, last_offset: int, ts: int) -> None:
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch
        self.batches.append((first_seq, last_seq, last_offset, ts))

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1] if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1][2] if self.batches else -1

    @property
    def last_timestamp(self) -> int:
        return self.batches[-1][3] if self.batches else -1

    def duplicate_of(self, epoch: int, first_seq: int, last_seq: int) -> DuplicateBatch | None:
        """The retained batch with exactly this epoch and sequence range, if any."""
        if epoch != self.epoch:
            return None
        for first, last, last_offset, timestamp in self.batches:
            if first == first_seq and last == last_seq:
                return DuplicateBatch(last_offset - (last - first), last_offset, timestamp)
        return None

    def drop_batches_below(self, offset: int) -> None:
        while self.batches and self.batches[0][2] < offset:
            self.batches.popleft()

    def __repr__(self) -> str:
        return f"ProducerStateEntry({self.producer_id}, epoch={self.epoch}, {list(self.batches)})"


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


# (producer id, epoch, first sequence, last sequence, last offset, max timestamp) of one batch
PendingBatch = tuple[int, int, int, int, int, int]


def producer_batches(
    buffer: bytes | bytearray | memoryview, limit: int, *, from_client: bool = False
) -> list[PendingBatch]:
    """The batches of ``buffer[:limit]`` (offsets assigned) that carry a producer id. The
    entries before ``limit`` are whole; v0/v1 entries carry none."""
    found = []
    position = 0
    unpack_size, unpack_fields = OFFSET_AND_SIZE.unpack_from, PRODUCER_FIELDS.unpack_from
    while position + HEADER_SIZE <= limit:
        base_offset, size = unpack_size(buffer, position)
        if buffer[position + MAGIC_AT] == MAGIC:
            delta, _, max_ts, producer_id, epoch, base_seq = unpack_fields(
                buffer, position + LAST_OFFSET_DELTA_AT
            )
            if producer_id >= 0:
                last_seq = (base_seq + delta) % (INT32_MAX + 1) if base_seq >= 0 else NO_SEQUENCE
                found.append((producer_id, epoch, base_seq, last_seq, base_offset + delta, max_ts))
        position += 12 + size
    return found


class ProducerStateManager:
    """The producer ids of one partition, kept in step with its log up to ``map_end_offset``.

    Invariants: every producer's last batch lies at or above the log start offset (retention
    evicts the rest: ``truncate_head``) and below ``map_end_offset``; a snapshot named N holds the
    state of the log below offset N. Not thread-safe: the log calls it under its lock.
    ``expiration_ms`` is transactional.id.expiration.ms: a producer whose last batch's timestamp
    is that much older than now is forgotten (``remove_expired``), as Kafka 2.1 does.

    With a ``background`` (the log's), a snapshot file this removes (below the log start, past
    a truncation, all of them when the log is emptied) is renamed ``.deleted`` at once, so no
    listing sees it, and unlinked on the background: an unlink frees the file's blocks, which
    on a file system mounted with discard waits for the device, and a roll may drop dozens of
    snapshots at once (the first roll after the tier caught up with a backlog) on the event
    loop. A ``.deleted`` file a crash leaves is removed when the log is loaded."""

    def __init__(
        self,
        directory: Path,
        expiration_ms: int,
        background: Callable[[Callable[[], None]], object] | None = None,
    ) -> None:
        self.directory = directory
        self.expiration_ms = expiration_ms
        self.background = background
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0
        self.last_snapshot_offset = 0

    # -- the append path -------------------------------------------------------------------------

    def check(self, batches: list[PendingBatch]) -> DuplicateBatch | None:
        """A leader's check of a producer's batches (ValidationType.Full): the duplicate they
        repeat, if one does (the whole append is then answered with it); KafkaError if one may
        not be appended; None if all may."""
        if len(batches) == 1:  # what clients send: one batch per partition
            producer_id, epoch, first_seq, _, _, _ = batches[0]
            current = self.producers.get(producer_id)
            if (
                current is not None
                and epoch == current.epoch
                and current.batches
                and first_seq == current.batches[-1][1] + 1
            ):
                return None  # the next in sequence: no retained batch can be its duplicate
        working: dict[int, tuple[int, int]] = {}  # producer id -> epoch, last sequence so far
        for producer_id, epoch, first_seq, last_seq, _, _ in batches:
            current = self.producers.get(producer_id)
            if current is not None:
                duplicate = current.duplicate_of(epoch, first_seq, last_seq)
                if duplicate is not None:
                    return duplicate
            known_epoch = current.epoch if current is not None else NO_EPOCH
            updated_epoch, updated_last = working.get(producer_id, (known_epoch, NO_SEQUENCE))
            if epoch < updated_epoch:
                raise KafkaError(
                    ErrorCode.INVALID_PRODUCER_EPOCH,
                    f"producer {producer_id}: epoch {epoch} is older than {updated_epoch}",
                )
            if epoch != updated_epoch:
                if first_seq != 0:
                    if updated_epoch != NO_EPOCH:
                        raise KafkaError(
                            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                            f"producer {producer_id}: sequence {first_seq} for new epoch {epoch}",
                        )
                    raise KafkaError(
                        ErrorCode.UNKNOWN_PRODUCER_ID,
                        f"no record of producer {producer_id} here: it expired, or its last "
                        f"batch was removed by retention (sequence {first_seq} is not 0)",
                    )
            else:
                if updated_last != NO_SEQUENCE:
                    last = updated_last
                elif current is not None and epoch == current.epoch:
                    last = current.last_seq
                else:
                    last = NO_SEQUENCE
                if last == NO_SEQUENCE and first_seq != 0:
                    raise KafkaError(
                        ErrorCode.UNKNOWN_PRODUCER_ID,
                        f"producer {producer_id} epoch {epoch}: next sequence not known here",
                    )
                if not _in_sequence(last, first_seq):
                    raise KafkaError(
                        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"producer {producer_id}: sequence {first_seq} does not follow {last}",
                    )
            working[producer_id] = (epoch, last_seq)
        return None

    def apply(self, batches: list[PendingBatch], end_offset: int) -> None:
        """Records appended batches; the state now covers the log below ``end_offset``."""
        producers = self.producers
        for producer_id, epoch, first_seq, last_seq, last_offset, timestamp in batches:
            entry = producers.get(producer_id)
            if entry is None:
                entry = producers[producer_id] = ProducerStateEntry(producer_id, epoch)
            elif entry.epoch != epoch:
                entry.batches.clear()
                entry.epoch = epoch
            entry.batches.append((first_seq, last_seq, last_offset, timestamp))
        self.map_end_offset = end_offset

    # -- retention, expiry, truncation -----------------------------------------------------------

    def truncate_head(self, log_start_offset: int) -> None:
        """The log start moved up: producers whose last batch is below it are forgotten (a
        later batch of theirs is UNKNOWN_PRODUCER_ID), and so are the snapshots below it."""
        for producer_id in [
            producer_id
            for producer_id, entry in self.producers.items()
            if not _retained(entry, log_start_offset)
        ]:
            del self.producers[producer_id]
        self.map_end_offset = max(self.map_end_offset, log_start_offset)
        self.delete_snapshots_below(log_start_offset)
        latest = self.latest_snapshot_offset()
        self.last_snapshot_offset = log_start_offset if latest is None else latest

    def remove_expired(self, now_ms: int) -> int:
        """Forgets producers idle for expiration_ms (by their last batch's timestamp); how many."""
        expired = [p for p, e in self.producers.items() if self._expired(e, now_ms)]
        for producer_id in expired:
            del self.producers[producer_id]
        return len(expired)

    def _expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return now_ms - entry.last_timestamp >= self.expiration_ms

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Drops snapshots outside (log start, log end] and, unless the state is already at
        ``log_end_offset``, reloads it from the latest snapshot left (empty at the log start
        if none): the caller replays the log from ``map_end_offset`` to its end."""
        self._remove(
            [
                path
                for offset, path in self.snapshot_files()
                if offset > log_end_offset or offset <= log_start_offset
            ]
        )
        if log_end_offset == self.map_end_offset:
            self.truncate_head(log_start_offset)
            return
        self.producers.clear()
        self._load_latest_snapshot(log_start_offset, now_ms)

    def clear(self, offset: int) -> None:
        """The log was emptied to start at ``offset``: no producers, no snapshots."""
        self.producers.clear()
        self._remove([path for _, path in self.snapshot_files()])
        self.map_end_offset = self.last_snapshot_offset = offset

    # -- snapshots ---------------------------------------------------------------------------------

    def snapshot_files(self) -> list[tuple[int, Path]]:
        """(offset, path) of every snapshot file, by offset."""
        found = []
        for path in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            stem = path.name[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit():
                found.append((int(stem), path))
        return sorted(found)

    def delete_snapshots_below(self, offset: int) -> None:
        """Removes the snapshots below ``offset`` (see ``_remove``)."""
        self._remove([path for snapshot, path in self.snapshot_files() if snapshot < offset])

    def _remove(self, paths: list[Path]) -> None:
        """Removes snapshot files: at once without a background; with one, each is renamed
        ``.deleted`` here (from then on no listing sees it) and unlinked on the background. A
        file already gone is skipped."""
        if self.background is None:
            for path in paths:
                path.unlink(missing_ok=True)
            return
        set_aside: list[Path] = []
        try:
            for path in paths:
                deleted = path.with_name(path.name + DELETED_SUFFIX)
                try:
                    os.replace(path, deleted)
                except FileNotFoundError:
                    continue
                set_aside.append(deleted)
        finally:
            if set_aside:

                def unlink() -> None:
                    for path in set_aside:
                        path.unlink(missing_ok=True)

                self.background(unlink)

    def latest_snapshot_offset(self) -> int | None:
        files = self.snapshot_files()
        return files[-1][0] if files else None

    def take_snapshot(self) -> Path | None:
        """Writes the state at map_end_offset unless a snapshot there exists: to a temporary file
        renamed into place, so a crash leaves the old snapshot or the new one, never half of
        one (the CRC catches a file the disk lost part of)."""
        if self.map_end_offset <= self.last_snapshot_offset:
            return None
        path = segment_file(self.directory, self.map_end_offset, SNAPSHOT_SUFFIX)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_bytes(encode_snapshot(self.producers.values()))
        os.replace(temporary, path)
        self.last_snapshot_offset = self.map_end_offset
        return path

    def snapshot_bytes(self, offset: int) -> bytes | None:
        """The snapshot file at ``offset`` as it is, or None if there is none (never taken,
        or deleted)."""
        try:
            return segment_file(self.directory, offset, SNAPSHOT_SUFFIX).read_bytes()
        except FileNotFoundError:
            return None

    def install_snapshot(self, offset: int, data: bytes) -> None:
        """Writes another replica's snapshot ``data`` as this partition's snapshot at
        ``offset`` (checked first: CorruptSnapshotError), as take_snapshot writes its own."""
        decode_snapshot(data)
        path = segment_file(self.directory, offset, SNAPSHOT_SUFFIX)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_bytes(data)
        os.replace(temporary, path)

    def load(self, log_start_offset: int, now_ms: int) -> None:
        """The state of the latest readable snapshot (corrupt ones deleted on the way)."""
        self.producers.clear()
        self._load_latest_snapshot(log_start_offset, now_ms)

    def _load_latest_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        for offset, path in reversed(self.snapshot_files()):
            try:
                entries = decode_snapshot(path.read_bytes())
            except CorruptSnapshotError as error:
                log.warning("%s: %s; deleted", path, error)
                path.unlink(missing_ok=True)
                continue
            for entry in entries:
                if _retained(entry, log_start_offset) and not self._expired(entry, now_ms):
                    self.producers[entry.producer_id] = entry
            self.map_end_offset = self.last_snapshot_offset = offset
            return
        self.map_end_offset = self.last_snapshot_offset = log_start_offset


def _retained(entry: ProducerStateEntry, log_start_offset: int) -> bool:
    entry.drop_batches_below(log_start_offset)
    return entry.last_offset >= log_start_offset


def encode_snapshot(entries: object) -> bytes:
    """Kafka 2.1's producer snapshot of ``entries`` (each producer's last batch only)."""
    out = bytearray(SNAPSHOT_HEADER.size)
    count = 0
    for entry in entries:  # type: ignore[attr-defined]
        if not entry.batches:
            continue
        first_seq, last_seq, last_offset, timestamp = entry.batches[-1]
        out += SNAPSHOT_ENTRY.pack(
            entry.producer_id, entry.epoch, last_seq, last_offset, last_seq - first_seq,
            timestamp, -1, -1,
        )  # fmt: skip
        count += 1
    SNAPSHOT_HEADER.pack_into(out, 0, SNAPSHOT_VERSION, 0, count)
    struct.pack_into(">I", out, 2, crc32c(memoryview(out)[ENTRIES_AT:]))
    return bytes(out)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    if len(data) < SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(f"{len(data)} bytes is shorter than a snapshot's header")
    version, crc, count = SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    if crc32c(memoryview(data)[ENTRIES_AT:]) != crc:
        raise CorruptSnapshotError("CRC-32C mismatch")
    if count < 0 or len(data) != SNAPSHOT_HEADER.size + count * SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"{len(data)} bytes cannot hold {count} entries")
    entries = []
    for (
        producer_id,
        epoch,
        last_seq,
        last_offset,
        delta,
        timestamp,
        _,
        _,
    ) in SNAPSHOT_ENTRY.iter_unpack(memoryview(data)[SNAPSHOT_HEADER.size :]):
        entry = ProducerStateEntry(producer_id, epoch)
        entry.add(epoch, last_seq - delta, last_seq, last_offset, timestamp)
        entries.append(entry)
    return entries


def file_batches(fd: int, start: int, end: int, chunk: int = 1 << 20) -> Iterator[PendingBatch]:
    """The producer batches of a segment file's bytes [start, end) (a rebuild from the log),
    read in chunks; a partial entry at the end is left out."""
    position = start
    while position < end:
        data = os.pread(fd, min(chunk, end - position), position)
        whole = _whole_prefix(data)
        if whole == 0:
            if len(data) >= end - position or len(data) < chunk:
                return
            chunk *= 2  # one entry larger than the chunk
            continue
        yield from producer_batches(data, whole)
        position += whole


def _whole_prefix(data: bytes) -> int:
    position, limit = 0, len(data)
    while position + 12 <= limit:
        size = OFFSET_AND_SIZE.unpack_from(data, position)[1]
        if size < 0 or position + 12 + size > limit:
            break
        position += 12 + size
    return position
