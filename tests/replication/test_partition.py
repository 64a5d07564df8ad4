"""A leader's view of its followers: high watermark and ISR changes."""

from __future__ import annotations

from tests.conftest import message_set
from tidelog.replication.partition import Partition


def leader_with(make_log, clock, messages: int = 10) -> Partition:
    log = make_log()
    log.append_as_leader(message_set(messages))
    partition = Partition("t", 0, 1, log)
    partition.make_leader(1, (1, 2, 3), frozenset({1, 2, 3}), clock.milliseconds())
    return partition


def test_the_high_watermark_is_the_smallest_log_end_in_the_isr(make_log, clock):
    partition = leader_with(make_log, clock)
    assert partition.high_watermark == 0  # followers have not fetched yet

    assert not partition.update_follower(2, 10, clock.milliseconds())
    assert partition.update_follower(3, 7, clock.milliseconds())
    assert partition.high_watermark == 7
    assert partition.update_follower(3, 10, clock.milliseconds())
    assert partition.high_watermark == 10


def test_a_follower_that_stops_catching_up_leaves_the_isr(make_log, clock):
    partition = leader_with(make_log, clock)
    partition.update_follower(2, 10, clock.milliseconds())
    partition.update_follower(3, 4, clock.milliseconds())

    clock.advance(5000)
    partition.update_follower(2, 10, clock.milliseconds())

    assert partition.isr_to_shrink(clock.milliseconds(), 10_000) is None
    clock.advance(6000)
    assert partition.isr_to_shrink(clock.milliseconds(), 10_000) == {1, 2}


def test_a_follower_rejoins_once_it_reaches_the_high_watermark(make_log, clock):
    partition = leader_with(make_log, clock)
    partition.isr = frozenset({1, 2})
    partition.update_follower(2, 10, clock.milliseconds())
    assert partition.high_watermark == 10

    partition.update_follower(3, 9, clock.milliseconds())
    assert partition.isr_to_expand(3) is None
    partition.update_follower(3, 10, clock.milliseconds())
    assert partition.isr_to_expand(3) == {1, 2, 3}
    assert partition.isr_to_expand(2) is None  # already in
    assert partition.isr_to_expand(7) is None  # not a replica
