"""Periodic background work (retention, roll checks, flushes, checkpoints) on a Clock.

``run_due`` runs every task whose time has come; tests call it after moving a ManualClock, the
broker runs ``run_forever`` as an asyncio task. A task that raises is logged and stays scheduled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.clock import Clock

log = logging.getLogger(__name__)


@dataclass
class _Task:
    name: str
    interval_ms: int
    action: Callable[[], object]
    next_run_ms: int


class Scheduler:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.tasks: list[_Task] = []

    def schedule(self, name: str, interval_ms: int, action: Callable[[], object]) -> None:
        now = self.clock.milliseconds()
        self.tasks.append(_Task(name, interval_ms, action, now + interval_ms))

    def run_due(self) -> list[str]:
        """Runs every task that is due; returns their names."""
        now = self.clock.milliseconds()
        ran = []
        for task in self.tasks:
            if task.next_run_ms <= now:
                task.next_run_ms = now + task.interval_ms
                try:
                    task.action()
                except Exception:
                    log.exception("scheduled task %s failed; it will run again", task.name)
                ran.append(task.name)
        return ran

    def ms_until_next(self) -> int:
        if not self.tasks:
            return 1000
        return max(0, min(task.next_run_ms for task in self.tasks) - self.clock.milliseconds())

    async def run_forever(self) -> None:
        while True:
            self.run_due()
            await asyncio.sleep(min(self.ms_until_next(), 1000) / 1000)
