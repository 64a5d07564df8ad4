"""Background tasks: due on the clock, run again after a failure, and runnable under asyncio."""

from __future__ import annotations

import asyncio

from tidelog.clock import SystemClock
from tidelog.log.scheduler import Scheduler


def test_a_task_runs_when_its_interval_has_passed_and_not_before(clock):
    scheduler, runs = Scheduler(clock), []
    scheduler.schedule("count", 1000, lambda: runs.append(clock.milliseconds()))

    clock.advance(999)
    assert scheduler.run_due() == []
    clock.advance(1)
    assert scheduler.run_due() == ["count"]
    assert scheduler.ms_until_next() == 1000


def test_a_failing_task_is_logged_and_stays_scheduled(clock, caplog):
    scheduler = Scheduler(clock)
    scheduler.schedule("broken", 10, lambda: 1 / 0)

    for _ in range(2):
        clock.advance(10)
        assert scheduler.run_due() == ["broken"]

    assert caplog.text.count("scheduled task broken failed") == 2


def test_run_forever_runs_tasks_on_the_wall_clock():
    async def scenario() -> int:
        scheduler, runs = Scheduler(SystemClock()), []
        scheduler.schedule("tick", 10, lambda: runs.append(1))
        task = asyncio.create_task(scheduler.run_forever())
        deadline = asyncio.get_running_loop().time() + 5
        while len(runs) < 3 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        task.cancel()
        return len(runs)

    assert asyncio.run(scenario()) >= 3
