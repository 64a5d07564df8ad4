"""What a power loss keeps of a file: the pages on the disk, and a random part of the rest."""

from __future__ import annotations

import os
import random
from pathlib import Path

from tidelog.cluster.power import PAGE_SIZE, first_unwritten, lose_unwritten


def write(path: Path, data: bytes, sync: bool) -> None:
    with open(path, "ab") as file:
        file.write(data)
        file.flush()
        if sync:
            os.fsync(file.fileno())


def test_a_file_synced_to_the_disk_is_kept_whole(tmp_path):
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    segment.parent.mkdir()
    write(segment, b"m" * (3 * PAGE_SIZE + 100), sync=True)

    assert first_unwritten(segment) is None
    assert lose_unwritten([tmp_path], random.Random(1)) == []
    assert segment.stat().st_size == 3 * PAGE_SIZE + 100


def test_the_unsynced_tail_is_cut_at_a_page_boundary_and_its_last_page_always_goes(tmp_path):
    synced = 2 * PAGE_SIZE
    sizes = set()
    for seed in range(20):
        log_dir = tmp_path / f"run-{seed}"
        segment = log_dir / "t-0" / "00000000000000000000.log"
        segment.parent.mkdir(parents=True)
        write(segment, b"s" * synced, sync=True)
        write(segment, b"u" * (4 * PAGE_SIZE - 10), sync=False)  # in the page cache only
        assert first_unwritten(segment) == synced

        (cut,) = lose_unwritten([log_dir], random.Random(seed))

        assert synced <= cut.kept < cut.size
        assert cut.kept % PAGE_SIZE == 0
        sizes.add(cut.kept)
    assert len(sizes) > 1  # where it is cut is chosen at random


def test_index_files_are_cut_too_and_other_files_never(tmp_path):
    partition = tmp_path / "t-0"
    partition.mkdir()
    for name in ("00000000000000000000.index", "leader-epoch-checkpoint"):
        write(partition / name, b"i" * PAGE_SIZE * 2, sync=False)

    cuts = lose_unwritten([tmp_path], random.Random(3))

    assert [Path(cut.path).name for cut in cuts] == ["00000000000000000000.index"]
    assert (partition / "leader-epoch-checkpoint").stat().st_size == PAGE_SIZE * 2
