"""The remote tier's back end: Kafka's RemoteStorageManager, in Python, over fsspec.

A remote segment is a few objects under ``{uri}/{topic}-{partition}/``, all named
``{start_offset:020d}-{segment uuid}`` plus a suffix: the ``.log`` data, its ``.index`` and
``.timeindex``, the ``.leader-epoch-checkpoint`` of its range, the producer ``.snapshot`` at
its end, and the ``.remoteLogIndex`` entries that point into the data. ``file://`` keeps them in
a local directory (the embedded default), ``s3://`` in a bucket through s3fs; ``rsm.config.*``
settings are passed to the fsspec file system as keyword arguments (``rsm.config.endpoint_url``
-> ``endpoint_url``).
"""

from __future__ import annotations

import contextlib
import enum
import importlib.util
import logging
import os
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.log.files import segment_name

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

log = logging.getLogger(__name__)


class RemoteStorageError(Exception):
    """The remote tier could not do what was asked (unreachable, missing object, ...)."""


class IndexType(enum.Enum):
    """The per-segment files that go with the data, by their suffix in the tier."""

    OFFSET = ".index"
    TIMESTAMP = ".timeindex"
    LEADER_EPOCH = ".leader-epoch-checkpoint"
    REMOTE_LOG_INDEX = ".remoteLogIndex"
    # the producer state at the segment's end (KIP-405's producer snapshot index)
    PRODUCER_SNAPSHOT = ".snapshot"


@dataclass(frozen=True)
class RemoteSegmentId:
    """One copy of one segment: its partition, first offset in the tier and a unique id (a
    retried copy gets a new id, so an orphan never shares names with a live copy)."""

    topic: str
    partition: int
    start_offset: int
    uuid: str

    @property
    def partition_key(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def name(self) -> str:
        return segment_name(self.start_offset, f"-{self.uuid}")


@dataclass(frozen=True)
class LogSegmentData:
    """What is copied for one segment: the rolled segment's files, the bytes of its
    leader-epoch entries and remote log index entries, and the producer snapshot taken at its
    end (None where the log has none: one written before producer state)."""

    log_segment: Path
    offset_index: Path
    time_index: Path
    leader_epochs: bytes
    remote_log_index: bytes
    producer_snapshot: bytes | None = None


def split_rsm_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``rsm.config.x.y`` broker settings as fsspec keyword arguments ``x_y``."""
    prefix = "rsm.config."
    return {
        key[len(prefix) :].replace(".", "_"): value
        for key, value in config.items()
        if key.startswith(prefix)
    }


class RemoteStorageManager:
    """Copies, fetches and deletes remote segments in one fsspec file system.

    Copy and delete are idempotent: copying the same segment id again writes the same objects,
    deleting a segment that is (partly) gone deletes what is left and succeeds. Every failure of
    the tier surfaces as RemoteStorageError, never as the back end's own exception type.

    The file system is made at its first use, so that a broker's start does not wait for
    fsspec's import (about 70 ms, a fifth of its imports); a URI whose back end is not there is
    refused at construction all the same. A ``file://`` tier's directory is made at once.
    """

    def __init__(self, uri: str, options: Mapping[str, Any] | None = None) -> None:
        self.uri = uri.rstrip("/")
        self.options = dict(options or {})
        self.protocol = self.uri.split("://", 1)[0] if "://" in self.uri else "file"
        self._fs: AbstractFileSystem | None = None
        self._fs_lock = threading.Lock()
        if self.protocol == "file":
            path = self.uri.split("://", 1)[-1]  # as fsspec's local file system reads it
            if not path.startswith("/"):
                path = os.path.abspath(os.path.expanduser(path))
            self.root = path.rstrip("/") or "/"
            os.makedirs(self.root, exist_ok=True)
        elif self.protocol == "s3":
            if importlib.util.find_spec("s3fs") is None:
                raise RemoteStorageError(f"remote.log.storage.uri {uri!r}: s3fs is not installed")
            self.root = self.uri.split("://", 1)[1].rstrip("/")
        else:  # another fsspec back end: resolved now, to refuse an unknown one at once
            self.root = self._connect().rstrip("/")
        # an object store's bucket is there already or made when the first object is written

    def _connect(self) -> str:
        """Makes the file system; returns the root it gives for the URI."""
        import fsspec

        try:
            self._fs, root = fsspec.core.url_to_fs(self.uri, **self.options)
        except (ImportError, ValueError) as error:
            raise RemoteStorageError(f"remote.log.storage.uri {self.uri!r}: {error}") from None
        return root

    @property
    def fs(self) -> AbstractFileSystem:
        """The fsspec file system, made on first use (by whichever pool thread comes first)."""
        if self._fs is None:
            with self._fs_lock:
                if self._fs is None:
                    self._connect()
        assert self._fs is not None
        return self._fs

    # -- names ---------------------------------------------------------------------------------

    def partition_path(self, topic: str, partition: int) -> str:
        return f"{self.root}/{topic}-{partition}"

    def object_path(self, segment: RemoteSegmentId, suffix: str) -> str:
        return f"{self.partition_path(segment.topic, segment.partition)}/{segment.name}{suffix}"

    def object_uri(self, segment: RemoteSegmentId, suffix: str = ".log") -> str:
        """The URI of one of a segment's objects, as the remote log index records it."""
        return f"{self.protocol}://{self.object_path(segment, suffix)}"

    def check_available(self) -> None:
        """Raises RemoteStorageError unless the tier's root (a directory, or a bucket) is
        there: a tier that is away must not look like a tier without segments."""

        def check() -> None:
            if self.protocol == "file":
                there = self.fs.isdir(self.root)
            else:
                self.fs.invalidate_cache(self.root.split("/", 1)[0])
                there = self.fs.exists(self.root.split("/", 1)[0])
            if not there:
                raise RemoteStorageError(f"the tier {self.uri} is not there")

        self.call("reach", self.uri, check)

    # -- RemoteStorageManager ------------------------------------------------------------------

    def copy_log_segment_data(self, segment: RemoteSegmentId, data: LogSegmentData) -> None:
        """Writes the segment's data and indexes; the remote log index object goes last, so
        its presence says the rest is there."""
        self.call("copy", segment, self._copy, segment, data)

    def _copy(self, segment: RemoteSegmentId, data: LogSegmentData) -> None:
        self.fs.makedirs(self.partition_path(segment.topic, segment.partition), exist_ok=True)
        for local, suffix in (
            (data.log_segment, ".log"),
            (data.offset_index, IndexType.OFFSET.value),
            (data.time_index, IndexType.TIMESTAMP.value),
        ):
            self.put_file(local, self.object_path(segment, suffix))
        self.write_object(
            self.object_path(segment, IndexType.LEADER_EPOCH.value), data.leader_epochs
        )
        if data.producer_snapshot is not None:
            self.write_object(
                self.object_path(segment, IndexType.PRODUCER_SNAPSHOT.value),
                data.producer_snapshot,
            )
        self.write_object(
            self.object_path(segment, IndexType.REMOTE_LOG_INDEX.value), data.remote_log_index
        )

    def put_file(self, local: Path, path: str) -> None:
        """The local file as the object at ``path``. On file:// the kernel copies it
        (shutil.copyfile: sendfile, the GIL released meanwhile) without fsspec's checks around
        it (a third of a segment copy's CPU on 1 MiB segments); elsewhere fsspec's put_file."""
        if self.protocol == "file":
            shutil.copyfile(local, path)
        else:
            self.fs.put_file(str(local), path)

    def write_object(self, path: str, data: bytes) -> None:
        """``data`` as the object at ``path`` (replacing it): on file:// one open and write,
        elsewhere fsspec's pipe_file."""
        if self.protocol == "file":
            with open(path, "wb") as file:
                file.write(data)
        else:
            self.fs.pipe_file(path, data)

    def fetch_log_segment(self, segment: RemoteSegmentId, start: int, end: int) -> bytes:
        """The bytes [start, end) of the segment's data (fewer if the object is shorter)."""
        return self.call(
            "fetch", segment, self._range, self.object_path(segment, ".log"), start, end
        )

    def fetch_range(self, object_uri: str, start: int, end: int) -> bytes:
        """The bytes [start, end) of an object named by its URI (from a remote log index)."""
        path = object_uri.split("://", 1)[1] if "://" in object_uri else object_uri
        return self.call("fetch", object_uri, self._range, path, start, end)

    def _range(self, path: str, start: int, end: int) -> bytes:
        # by keyword: s3fs's cat_file takes a version id before start and end
        return self.fs.cat_file(path, start=start, end=end)

    def fetch_index(self, segment: RemoteSegmentId, index: IndexType) -> bytes:
        return self.call(
            "fetch index of", segment, self.fs.cat_file, self.object_path(segment, index.value)
        )

    def delete_log_segment_data(self, segment: RemoteSegmentId) -> None:
        """Deletes every object of the segment; those already gone are not an error."""
        paths = [self.object_path(segment, s) for s in [".log", *(i.value for i in IndexType)]]
        self.call("delete", segment, self._delete, paths)

    def _delete(self, paths: list[str]) -> None:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(path)

    def delete_partition(self, topic: str, partition: int) -> None:
        """Deletes everything of a partition (topic deletion)."""
        path = self.partition_path(topic, partition)

        def remove() -> None:
            # every replica asks; one may be removing the same objects at the same moment
            with contextlib.suppress(FileNotFoundError):
                if self.fs.exists(path):
                    self.fs.rm(path, recursive=True)

        self.call("delete partition", f"{topic}-{partition}", remove)

    def call(self, what: str, subject: object, action: Any, *args: Any) -> Any:
        try:
            return action(*args)
        except RemoteStorageError:
            raise
        except Exception as error:  # each back end raises its own kinds
            raise RemoteStorageError(f"{what} {subject} in {self.uri}: {error!r}") from error
