"""Format conversion for fetches (KIP-32): offsets kept, timestamps dropped or added."""

from __future__ import annotations

import pytest

from tests.conftest import message_set
from tests.records.test_format import read_with_kafka_python
from tidelog.records.conversion import convert_message_set
from tidelog.records.format import MESSAGE_SET_CODECS, Codec, iter_deep, iter_shallow
from tidelog.records.validation import RecordsPolicy, validate_and_assign_offsets

NOW = 1_700_000_000_000


def stored(magic: int, codec: Codec, count: int = 4, first_offset: int = 50) -> bytes:
    """A message set as a log of format ``magic`` holds it."""
    return validate_and_assign_offsets(
        message_set(count, magic=magic, codec=codec, timestamp=lambda i: NOW + i),
        next_offset=first_offset,
        policy=RecordsPolicy(magic=magic),
        now=NOW,
    ).buffer


@pytest.mark.parametrize("codec", list(MESSAGE_SET_CODECS))
def test_down_conversion_keeps_offsets_keys_and_values(codec):
    original = stored(1, codec) + stored(1, codec, first_offset=54)

    converted = convert_message_set(original, 0, NOW)

    before, after = list(iter_deep(original)), list(iter_deep(converted))
    assert [(m.offset, m.key, m.value) for m in after] == [
        (m.offset, m.key, m.value) for m in before
    ]
    assert {(m.magic, m.timestamp) for m in after} == {(0, -1)}
    assert [s.offset for s in iter_shallow(converted)] == [s.offset for s in iter_shallow(original)]
    assert [o for o, *_ in read_with_kafka_python(converted)] == list(range(50, 58))


@pytest.mark.parametrize("codec", list(MESSAGE_SET_CODECS))
def test_up_conversion_gives_every_message_the_broker_time(codec):
    converted = convert_message_set(stored(0, codec), 1, NOW + 77)

    messages = list(iter_deep(converted))
    assert [m.offset for m in messages] == [50, 51, 52, 53]
    assert {(m.magic, m.timestamp) for m in messages} == {(1, NOW + 77)}


def test_a_partial_entry_at_the_end_of_a_fetch_is_dropped():
    whole = stored(1, Codec.NONE)

    converted = convert_message_set(whole[:-10], 0, NOW)

    assert [m.offset for m in iter_deep(converted)] == [50, 51, 52]


def test_data_already_in_the_wanted_format_is_passed_through_byte_for_byte():
    original = stored(0, Codec.GZIP)

    assert convert_message_set(original, 0, NOW) == original
