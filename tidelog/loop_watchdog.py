"""A watchdog that logs where a process's event loop was held when it blocked.

Enabled by the environment variable TIDELOG_LOOP_WATCHDOG_MS (a threshold in milliseconds), read
by ``runtime.run``: a diagnostic for benchmarks (benchmarks/rebuild_stall.py), off by default.
The loop stamps a heartbeat every few milliseconds; a thread samples the loop thread's stack
while the heartbeat is older than a few milliseconds and, once the loop runs again after a block
of at least the threshold, logs one line:

    event loop blocked 123 ms (started 10:01:02.345); 11/12 samples in: a.py:10 f < b.py:20 g

The stack named is the one seen in most samples, innermost frame first. A sample costs the
watchdog thread the GIL for a moment, so the watchdog is not for production.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType

log = logging.getLogger(__name__)

ENVIRONMENT_VARIABLE = "TIDELOG_LOOP_WATCHDOG_MS"
HEARTBEAT_S = 0.002
SAMPLE_S = 0.005
FRAMES_SHOWN = 8


def threshold_from_environment() -> float | None:
    """The threshold in seconds from TIDELOG_LOOP_WATCHDOG_MS, or None when it is not set."""
    value = os.environ.get(ENVIRONMENT_VARIABLE)
    if not value:
        return None
    try:
        milliseconds = float(value)
    except ValueError:
        raise ValueError(f"{ENVIRONMENT_VARIABLE}={value!r}: a number of milliseconds") from None
    if milliseconds <= 0:
        raise ValueError(f"{ENVIRONMENT_VARIABLE}={value!r}: must be above 0")
    return milliseconds / 1000


def stack_summary(frame: FrameType | None, frames_shown: int = FRAMES_SHOWN) -> str:
    """``file:line function`` of the innermost frames, innermost first, joined by `` < ``."""
    parts: list[str] = []
    while frame is not None and len(parts) < frames_shown:
        code = frame.f_code
        parts.append(f"{Path(code.co_filename).name}:{frame.f_lineno} {code.co_name}")
        frame = frame.f_back
    return " < ".join(parts)


class LoopWatchdog:
    """Watches the event loop running on the thread that calls ``start``.

    ``heartbeat`` is the monotonic time the loop last ran the heartbeat callback; a block is the
    time between two heartbeats beyond HEARTBEAT_S. Each block of at least ``threshold`` seconds
    is logged once, after it ends, with the stack seen in most of its samples. ``blocks`` keeps
    the length in seconds of each logged block, in order.
    """

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.heartbeat = time.monotonic()
        self.blocks: list[float] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Starts beating on ``loop`` (from its own thread) and the watching thread."""
        self._loop = loop
        self._loop_thread_id = threading.get_ident()
        self.heartbeat = time.monotonic()
        loop.call_soon(self._beat)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _beat(self) -> None:
        self.heartbeat = time.monotonic()
        if self._loop is not None and not self._stopped.is_set():
            self._loop.call_later(HEARTBEAT_S, self._beat)

    def _watch(self) -> None:
        while not self._stopped.wait(SAMPLE_S):
            began = self.heartbeat
            if time.monotonic() - began < HEARTBEAT_S + SAMPLE_S:
                continue
            stacks: Counter[str] = Counter()
            while self.heartbeat == began and not self._stopped.is_set():
                frame = sys._current_frames().get(self._loop_thread_id)
                if frame is None:
                    return
                stacks[stack_summary(frame)] += 1
                del frame
                time.sleep(SAMPLE_S)
            blocked = self.heartbeat - began - HEARTBEAT_S
            if blocked >= self.threshold and stacks:
                self.blocks.append(blocked)
                stack, count = stacks.most_common(1)[0]
                started = time.time() - (time.monotonic() - began)
                log.warning(
                    "event loop blocked %d ms (started %s.%03d); %d/%d samples in: %s",
                    blocked * 1000,
                    time.strftime("%H:%M:%S", time.localtime(started)),
                    int(started * 1000) % 1000,
                    count,
                    sum(stacks.values()),
                    stack,
                )
