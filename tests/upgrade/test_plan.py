"""The steps an upgrade plans from each starting point (no processes: settings only)."""

from __future__ import annotations

import pytest

from tidelog.upgrade.plan import BrokerSettings, plan


def brokers(release: str, protocol: str, message_format: str) -> list[BrokerSettings]:
    return [BrokerSettings(b, release, protocol, message_format) for b in (1, 2, 3)]


def test_from_0_9_0_every_phase_rolls_every_broker_in_order():
    steps = plan(brokers("0.9.0", "0.9.0", "0.9.0"), "0.10.0")
    assert [(s.phase.split(":")[0], s.broker_id) for s in steps] == [
        ("phase 1", 1), ("phase 1", 2), ("phase 1", 3),
        ("phase 1", 1), ("phase 1", 2), ("phase 1", 3),
        ("phase 2", 1), ("phase 2", 2), ("phase 2", 3),
    ]  # fmt: skip
    assert steps[0].settings == {
        "broker.protocol.max.version": "0.10.0",
        "inter.broker.protocol.version": "0.9.0",
        "log.message.format.version": "0.9.0",
    }
    assert steps[3].settings == {"inter.broker.protocol.version": "0.10.0-IV0"}
    assert steps[6].settings == {"log.message.format.version": "0.10.0"}
    assert [s.format_after for s in steps] == [0] * 6 + [1] * 3


def test_a_cluster_half_way_is_planned_from_where_it_stands():
    half = brokers("0.10.0", "0.10.0-IV0", "0.9.0")
    half[0] = BrokerSettings(1, "0.10.0", "0.10.0-IV0", "0.10.0")
    assert [(s.broker_id, s.settings) for s in plan(half, "0.10.0")] == [
        (2, {"log.message.format.version": "0.10.0"}),
        (3, {"log.message.format.version": "0.10.0"}),
    ]
    assert plan(brokers("0.10.0", "0.10.0", "0.10.0"), "0.10.0") == []


def test_from_0_10_0_to_0_10_1_only_the_code_changes_pinned_to_what_runs():
    steps = plan(brokers("0.10.0", "0.10.0", "0.10.0"), "0.10.1")
    assert [s.broker_id for s in steps] == [1, 2, 3]
    assert steps[0].settings["inter.broker.protocol.version"] == "0.10.0"
    assert steps[0].settings["log.message.format.version"] == "0.10.0"


def test_an_unknown_target_is_refused_with_the_allowed_ones():
    with pytest.raises(ValueError, match="allowed: 0.10.0, 0.10.1, 2.1"):
        plan(brokers("0.9.0", "0.9.0", "0.9.0"), "0.11.0")


def test_a_cluster_mixing_formats_is_pinned_to_the_oldest():
    mixed = brokers("0.10.1", "0.10.0", "0.10.0")
    mixed[1] = BrokerSettings(2, "0.10.0", "0.10.0-IV0", "0.9.0")

    steps = plan(mixed, "0.10.1")

    assert steps[0].settings["log.message.format.version"] == "0.9.0"
    assert [s.broker_id for s in steps if s.phase.startswith("phase 2")] == [2]


def test_brokers_of_a_newer_release_than_the_target_plan_nothing():
    assert plan(brokers("2.1", "2.1", "0.10.0"), "0.10.1") == []


def test_from_0_10_0_to_2_1_the_protocol_goes_first_with_the_format_held():
    """Kafka 0.11's upgrade notes: new code pinned, then inter.broker.protocol.version bumped
    with log.message.format.version held, then the format once the consumers are upgraded."""
    steps = plan(brokers("0.10.0", "0.10.0", "0.10.0"), "2.1")
    assert [(s.phase, s.broker_id) for s in steps] == [
        ("phase 1: new code, pinned", 1), ("phase 1: new code, pinned", 2),
        ("phase 1: new code, pinned", 3),
        ("phase 1: protocol 2.1", 1), ("phase 1: protocol 2.1", 2), ("phase 1: protocol 2.1", 3),
        ("phase 2: format 2.1", 1), ("phase 2: format 2.1", 2), ("phase 2: format 2.1", 3),
    ]  # fmt: skip
    assert steps[0].settings == {
        "broker.protocol.max.version": "2.1",
        "inter.broker.protocol.version": "0.10.0",
        "log.message.format.version": "0.10.0",
    }
    assert steps[3].settings == {"inter.broker.protocol.version": "2.1"}
    assert steps[6].settings == {"log.message.format.version": "2.1"}
    assert [s.format_after for s in steps] == [1] * 6 + [2] * 3


def test_from_0_9_0_to_2_1_straight_through_and_from_0_10_on_2_1_code():
    steps = plan(brokers("0.9.0", "0.9.0", "0.9.0"), "2.1")
    assert [s.settings for s in steps[3::3]] == [
        {"inter.broker.protocol.version": "2.1"},
        {"log.message.format.version": "2.1"},
    ]
    assert [s.format_after for s in steps] == [0] * 6 + [2] * 3
    # new code already rolled, protocol already bumped: only the format phase is left
    assert [s.phase for s in plan(brokers("2.1", "2.1", "0.10.0"), "2.1")] == [
        "phase 2: format 2.1"
    ] * 3
