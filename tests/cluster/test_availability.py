"""The availability figures of a scenario, from acknowledgement times alone."""

from __future__ import annotations

import pytest

from tidelog.cluster.availability import availability, window


def test_the_longest_stretch_counts_from_the_start_and_to_the_end():
    assert window([1.0, 2.0, 3.0], [], 0.0, 10.0).longest_gap_s == 7.0
    assert window([4.0, 5.0], [], 0.0, 6.0).longest_gap_s == 4.0
    assert window([], [2.0], 0.0, 6.0).longest_gap_s == 6.0


def test_served_again_when_the_longest_stretch_in_a_fault_s_time_ends():
    # a message in flight at the fault is answered at once; the outage comes after it
    found = window([1.0, 2.0, 2.1, 7.5, 8.0], [2.05, 9.0], 0.0, 10.0)

    assert found.served_again_after_fault_s == pytest.approx((5.45, None))
    assert (found.longest_gap_s, found.longest_gap_from) == pytest.approx((5.4, 2.1))


def test_per_partition_and_overall():
    acked = [(0, 1.0), (1, 1.1), (0, 2.0), (1, 6.0), (0, 6.1)]

    found = availability(acked, [0, 1, 2], [2.5], 0.0, 7.0)

    assert found.partitions[1].longest_gap_s == pytest.approx(4.9)
    assert found.partitions[0].served_again_after_fault_s == pytest.approx((3.6,))
    assert found.partitions[2].served_again_after_fault_s == (None,)  # never acknowledged
    assert found.partitions[2].longest_gap_s == 7.0
    assert round(found.overall.longest_gap_s, 6) == 4.0
    assert found.as_dict()["partitions"]["1"]["longest_gap_s"] == 4.9
