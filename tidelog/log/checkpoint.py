"""Kafka's offset checkpoint files: ``recovery-point-offset-checkpoint`` and
``replication-offset-checkpoint`` (high watermarks), one per log dir.

Format: a version line (0), a count line, then one ``topic partition offset`` line per
partition. A file is replaced atomically: written beside, fsynced, renamed over.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

VERSION = 0

TopicPartition = tuple[str, int]


class CorruptCheckpointError(Exception):
    pass


def write_checkpoint(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    lines = [str(VERSION), str(len(offsets))]
    lines += [
        f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())
    ]
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w") as file:
        file.write("\n".join(lines) + "\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """The offsets in ``path``; empty if it does not exist. A malformed file raises."""
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    try:
        version, count = int(lines[0]), int(lines[1])
        if version != VERSION:
            raise CorruptCheckpointError(f"{path}: unknown checkpoint version {version}")
        offsets = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split()
            offsets[(topic, int(partition))] = int(offset)
    except (IndexError, ValueError) as error:
        raise CorruptCheckpointError(f"{path}: malformed checkpoint ({error})") from None
    if len(offsets) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries, found {len(offsets)}")
    return offsets
