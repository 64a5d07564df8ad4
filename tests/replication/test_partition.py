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


def test_a_follower_rejoins_only_once_it_holds_where_the_leadership_began(make_log, clock):
    """KAFKA-7128: a new leader's high watermark is its view as a follower, which can be below
    what the last leader acknowledged; a follower at that high watermark but short of the log
    end the leadership began with would, elected next, lose what lies between."""
    log = make_log()
    log.append_as_leader(message_set(10))  # 0-9, acknowledged by the last leader
    log.high_watermark = 5  # as this broker last heard it, as a follower
    partition = Partition("t", 0, 1, log)
    partition.make_leader(2, (1, 2, 3), frozenset({1, 2}), clock.milliseconds())
    assert partition.high_watermark == 5  # follower 2, in the ISR, has not fetched yet

    partition.update_follower(3, 5, clock.milliseconds())  # out of the ISR, at the watermark
    assert partition.isr_to_expand(3) is None
    partition.update_follower(3, 10, clock.milliseconds())
    assert partition.isr_to_expand(3) == {1, 2, 3}


def test_a_caught_up_follower_that_a_fetch_session_does_not_name_stays_in_sync(make_log, clock):
    """In a fetch session an idle partition is not named: the follower's last fetch counts."""
    partition = leader_with(make_log, clock)
    partition.update_follower(2, 10, clock.milliseconds())
    partition.update_follower(3, 10, clock.milliseconds())
    clock.advance(20_000)
    last_fetch = {2: clock.milliseconds(), 3: clock.milliseconds() - 15_000}
    assert partition.isr_to_shrink(clock.milliseconds(), 10_000, last_fetch) == {1, 2}


def test_an_append_after_an_idle_while_does_not_push_caught_up_followers_out(make_log, clock):
    partition = leader_with(make_log, clock)
    partition.update_follower(2, 10, clock.milliseconds())
    partition.update_follower(3, 10, clock.milliseconds())
    clock.advance(20_000)
    last_fetch = {2: clock.milliseconds(), 3: clock.milliseconds()}
    partition.credit_caught_up(last_fetch)  # the append comes: both were at the log end
    partition.log.append_as_leader(message_set(5))
    assert partition.isr_to_shrink(clock.milliseconds(), 10_000, last_fetch) is None
    clock.advance(11_000)  # and then neither fetches the new messages
    assert partition.isr_to_shrink(clock.milliseconds(), 10_000, last_fetch) == {1}


def test_the_low_watermark_is_the_smallest_log_start_of_the_replicas_on_live_brokers(
    make_log, clock
):
    partition = leader_with(make_log, clock)
    partition.update_follower(2, 10, clock.milliseconds())
    partition.update_follower(3, 10, clock.milliseconds())
    partition.log.maybe_increment_log_start_offset(6, "DeleteRecords")
    # a follower that has not named its log start yet holds it at -1
    assert partition.low_watermark({1, 2, 3}) == -1
    assert partition.update_follower_log_start(2, 6)
    assert not partition.update_follower_log_start(2, 6)  # unchanged
    assert partition.update_follower_log_start(3, 4)
    assert partition.low_watermark({1, 2, 3}) == 4
    # broker 3 is not alive: its replica does not count
    assert partition.low_watermark({1, 2}) == 6


def test_a_follower_that_keeps_up_with_steady_appends_stays_in_the_isr(make_log, clock):
    """Each fetch asks from where the log ended at the one before: never from the log end, as
    the leader appends between them, but caught up as of the fetch before."""
    partition = leader_with(make_log, clock)
    partition.update_follower(2, 10, clock.milliseconds())
    partition.update_follower(3, 10, clock.milliseconds())
    for _ in range(15):
        end = partition.log.log_end_offset
        partition.log.append_as_leader(message_set(5))
        clock.advance(1000)
        partition.update_follower(2, end, clock.milliseconds())  # had all there was
        partition.update_follower(3, 10, clock.milliseconds())  # fetches, gets nothing further

    assert partition.isr_to_shrink(clock.milliseconds(), 10_000) == {1, 2}
