"""The event loop tidelog's processes run on: uvloop's, on libuv.

Measured with benchmarks/cluster.py on a 2-core machine (three brokers, replication factor 3,
acks=1 at 55 MB/s): produce p99 10-20 ms on asyncio's own loop, 6-8.5 ms on uvloop. The code
is plain asyncio and runs on either; tests run parts of it on both. uvloop's ``loop.time()``
counts whole milliseconds: what measures latency uses ``time.perf_counter()``.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Runs ``main`` to completion on a new uvloop event loop, as ``asyncio.run`` does."""
    return uvloop.run(main)
