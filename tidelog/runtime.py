"""The event loop tidelog's processes run on: uvloop's, on libuv.

Measured with benchmarks/cluster.py on a 2-core machine (three brokers, replication factor 3,
acks=1 at 55 MB/s): produce p99 10-20 ms on asyncio's own loop, 6-8.5 ms on uvloop. The code
is plain asyncio and runs on either; tests run parts of it on both. uvloop's ``loop.time()``
counts whole milliseconds: what measures latency uses ``time.perf_counter()``. With
TIDELOG_LOOP_WATCHDOG_MS set, a watchdog logs each block of the loop (tidelog.loop_watchdog).

Cyclic garbage collection runs less often than CPython's default (GC_THRESHOLDS). A broker under
many small requests allocates a few dicts and lists per request, and its queues keep thousands of
them alive, so the default youngest-generation threshold of 700 allocations ran a collection
every few requests that walked every queued request again. Measured with benchmarks/shape.py
(60 partitions, acks=all, 12 MB/s offered, librdkafka at its defaults): 6.96 MB/s delivered at
the default thresholds, 8.49-10.0 MB/s at these, for the same brokers' CPU.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

from tidelog.loop_watchdog import LoopWatchdog, threshold_from_environment

T = TypeVar("T")

# gc.set_threshold: a young collection every 50,000 allocations not yet freed (CPython: 700),
# the middle generation every 20 of those (10), the oldest every 100 of those (10). Garbage in
# cycles is rare on the hot paths (requests are freed by reference counting), so this delays
# little memory.
GC_THRESHOLDS = (50_000, 20, 100)


def run(main: Coroutine[Any, Any, T]) -> T:
    """Runs ``main`` to completion on a new uvloop event loop, as ``asyncio.run`` does, with
    the collector at GC_THRESHOLDS."""
    gc.set_threshold(*GC_THRESHOLDS)
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
