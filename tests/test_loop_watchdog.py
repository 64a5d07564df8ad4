import asyncio
import logging
import time

import pytest

from tidelog import runtime
from tidelog.loop_watchdog import ENVIRONMENT_VARIABLE, LoopWatchdog, threshold_from_environment


def hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)


async def block_then_idle(block_seconds: float, idle_seconds: float) -> None:
    await asyncio.sleep(0.02)
    hold_the_loop(block_seconds)
    await asyncio.sleep(idle_seconds)


def test_a_block_is_logged_with_the_function_that_held_the_loop(monkeypatch, caplog):
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "50")
    with caplog.at_level(logging.WARNING, logger="tidelog.loop_watchdog"):
        runtime.run(block_then_idle(0.2, 0.1))
    blocks = [r.getMessage() for r in caplog.records if "event loop blocked" in r.getMessage()]
    assert len(blocks) == 1, blocks
    assert "hold_the_loop" in blocks[0].split("samples in:")[1]
    blocked_ms = int(blocks[0].split()[3])
    assert 180 <= blocked_ms < 1000, blocks[0]


def test_blocks_shorter_than_the_threshold_are_not_logged():
    async def short_blocks(watchdog: LoopWatchdog) -> None:
        watchdog.start(asyncio.get_running_loop())
        try:
            for _ in range(5):
                hold_the_loop(0.03)
                await asyncio.sleep(0.02)
            hold_the_loop(0.25)
            await asyncio.sleep(0.1)
        finally:
            watchdog.stop()

    watchdog = LoopWatchdog(threshold=0.2)
    asyncio.run(short_blocks(watchdog))
    assert len(watchdog.blocks) == 1 and 0.2 <= watchdog.blocks[0] < 1.0, watchdog.blocks


@pytest.mark.parametrize("value", ["0", "-5", "fast"])
def test_a_threshold_that_is_not_a_positive_number_is_refused(monkeypatch, value):
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, value)
    with pytest.raises(ValueError, match=ENVIRONMENT_VARIABLE):
        threshold_from_environment()
