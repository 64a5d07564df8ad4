"""The leader epoch cache: where each epoch starts, kept across restarts and truncations."""

from __future__ import annotations

import os

import pytest

from tests.conftest import message_set
from tidelog.log.leader_epoch import UNDEFINED_EPOCH_OFFSET, LeaderEpochCache


def test_end_offsets_follow_the_start_of_the_next_epoch(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    cache.assign(1, 0)
    cache.assign(3, 40)
    cache.assign(4, 55)

    assert cache.end_offset_for(0, 100) == UNDEFINED_EPOCH_OFFSET
    assert cache.end_offset_for(1, 100) == 40
    assert cache.end_offset_for(2, 100) == 40  # an epoch that wrote nothing ends where 3 starts
    assert cache.end_offset_for(3, 100) == 55
    assert cache.end_offset_for(4, 100) == 100
    assert LeaderEpochCache(tmp_path).entries == [(1, 0), (3, 40), (4, 55)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 40\n4 55\n"


def test_an_older_epoch_is_ignored_and_an_earlier_start_refused(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    cache.assign(2, 10)
    cache.assign(1, 20)

    assert cache.entries == [(2, 10)]
    with pytest.raises(ValueError, match="before epoch 2"):
        cache.assign(3, 5)


def test_a_log_records_its_epochs_and_forgets_them_when_truncated(make_log, clock):
    log = make_log()
    log.append_as_leader(message_set(5), leader_epoch=1)
    log.append_as_leader(message_set(5), leader_epoch=1)
    log.append_as_leader(message_set(5), leader_epoch=2)
    assert log.leader_epochs.entries == [(1, 0), (2, 10)]

    log.truncate_to(8)

    assert log.leader_epochs.entries == [(1, 0)]
    assert log.leader_epochs.end_offset_for(1, log.log_end_offset) == 8
    follower = make_log("follower-0")
    follower.append_as_follower(log.read(0, 10**6).slice.read(), leader_epoch=3)
    assert follower.leader_epochs.entries == [(3, 0)]


def test_a_new_epoch_is_written_at_once_and_synced_with_the_log(make_log, monkeypatch):
    """An append in a new epoch does not wait for the disk; the log's flush syncs the file."""
    import tidelog.log.leader_epoch as leader_epoch

    synced = []
    real_fsync = leader_epoch.os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(leader_epoch.os, "fsync", recording_fsync)
    log = make_log()
    log.append_as_leader(message_set(5), leader_epoch=1)

    assert LeaderEpochCache(log.directory).entries == [(1, 0)]  # in the file already
    checkpoint = str(log.directory / "leader-epoch-checkpoint")
    assert checkpoint not in synced
    log.flush()
    assert synced.count(checkpoint) == 1
    log.append_as_leader(message_set(5), leader_epoch=1)
    log.flush()  # the same epoch: nothing new to sync
    assert synced.count(checkpoint) == 1
