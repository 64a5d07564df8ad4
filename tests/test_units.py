"""A run's figures as the report writes them: a unit that fits the value, never a real value
rounded to 0."""

from __future__ import annotations

import pytest

from tidelog.units import duration, milliseconds, number


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.8, "0.8 s"),
        (2.6, "2.6 s"),
        (0.04, "0.04 s"),
        (90.0, "90.0 s"),
        (599.0, "599.0 s"),
        (600.0, "10 min"),
        (75 * 60.0, "75 min"),
        (230 * 60.0, "230 min"),
    ],
)
def test_a_duration_is_written_in_a_unit_that_fits_it(seconds, text):
    assert duration(seconds) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(25.26, "25.3"), (0.8, "0.8"), (0.04, "0.04"), (0.0049, "0.005"), (0.0, "0.0")],
)
def test_a_number_keeps_its_first_significant_digit(value, text):
    assert number(value) == text


def test_latencies_share_one_unit():
    assert milliseconds(25.26, 14.12) == "25.3 / 14.1 ms"
    assert milliseconds(0.04, 0.012) == "0.04 / 0.01 ms"
