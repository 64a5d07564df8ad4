"""The event loop tidelog's processes run on: uvloop's, on libuv.

Measured with benchmarks/cluster.py on a 2-core machine (three brokers, replication factor 3,
acks=1 at 55 MB/s): produce p99 10-20 ms on asyncio's own loop, 6-8.5 ms on uvloop. The code
is plain asyncio and runs on either; tests run parts of it on both. uvloop's ``loop.time()``
counts whole milliseconds: what measures latency uses ``time.perf_counter()``. With
TIDELOG_LOOP_WATCHDOG_MS set, a watchdog logs each block of the loop (tidelog.loop_watchdog).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

from tidelog.loop_watchdog import LoopWatchdog, threshold_from_environment

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Runs ``main`` to completion on a new uvloop event loop, as ``asyncio.run`` does."""
    threshold = threshold_from_environment()
    if threshold is None:
        return uvloop.run(main)
    return uvloop.run(_watched(main, LoopWatchdog(threshold)))


async def _watched(main: Coroutine[Any, Any, T], watchdog: LoopWatchdog) -> T:
    watchdog.start(asyncio.get_running_loop())
    try:
        return await main
    finally:
        watchdog.stop()
