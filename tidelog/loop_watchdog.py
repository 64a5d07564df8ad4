"""A watchdog that logs where a process's event loop was held when it blocked.

Enabled by the environment variable TIDELOG_LOOP_WATCHDOG_MS (a threshold in milliseconds), read
by ``runtime.run``: a diagnostic for benchmarks (benchmarks/rebuild_stall.py), off by default.
The loop stamps a heartbeat every few milliseconds; a thread samples the loop thread's stack
while the heartbeat is older than a few milliseconds and, once the loop runs again after a block
of at least the threshold, logs one line:

    event loop blocked 123 ms (started 10:01:02.345; on cpu 20, runnable 90, asleep 13 ms;
    other threads: c.py:5 h (9)); 11/12 samples in: a.py:10 f < b.py:20 g

The stack named is the one seen in most samples, innermost frame first. A block whose stack is
the loop's own run (no callback of ours on the stack) was spent in the loop's C code, waiting
for the GIL, or waiting for a CPU. The loop thread's scheduler statistics
(/proc/self/task/TID/schedstat, Linux) say which: "on cpu" it ran, "runnable" it was ready but
the kernel ran something else (the machine is short of CPUs), "asleep" it waited in a system
call or for the GIL. "other threads" names the innermost frame seen most often in the process's
other threads that were not idle while the loop was blocked: the likely holder of the GIL. A
sample costs the watchdog thread the GIL for a moment, so the watchdog is not for production.
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
# innermost functions of threads that wait for work (a pool's queue, an event, a socket)
IDLE_FUNCTIONS = frozenset(
    {"_worker", "wait", "_wait_for_tstate_lock", "sleep", "select", "poll", "get", "_watch"}
)


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


def schedstat(native_thread_id: int) -> tuple[int, int]:
    """(nanoseconds on a CPU, nanoseconds runnable but waiting for one) of a thread of this
    process, from Linux's /proc/self/task/TID/schedstat; (0, 0) where there is none."""
    try:
        with open(f"/proc/self/task/{native_thread_id}/schedstat") as stats:
            on_cpu, runnable, _ = stats.read().split()
    except (OSError, ValueError):
        return 0, 0
    return int(on_cpu), int(runnable)


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
        self._loop_native_id = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Starts beating on ``loop`` (from its own thread) and the watching thread."""
        self._loop = loop
        self._loop_thread_id = threading.get_ident()
        self._loop_native_id = threading.get_native_id()
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
            others: Counter[str] = Counter()
            watched_from = time.monotonic()
            on_cpu_before, runnable_before = schedstat(self._loop_native_id)
            while self.heartbeat == began and not self._stopped.is_set():
                frames = sys._current_frames()
                frame = frames.pop(self._loop_thread_id, None)
                if frame is None:
                    return
                stacks[stack_summary(frame)] += 1
                frames.pop(threading.get_ident(), None)
                for other in frames.values():
                    if other.f_code.co_name not in IDLE_FUNCTIONS:
                        others[stack_summary(other, 2)] += 1
                del frame, frames
                time.sleep(SAMPLE_S)
            watched = self.heartbeat - watched_from
            blocked = self.heartbeat - began - HEARTBEAT_S
            if blocked >= self.threshold and stacks:
                on_cpu_after, runnable_after = schedstat(self._loop_native_id)
                on_cpu = (on_cpu_after - on_cpu_before) / 1e6
                runnable = (runnable_after - runnable_before) / 1e6
                asleep = max(0.0, watched * 1000 - on_cpu - runnable)
                self.blocks.append(blocked)
                stack, count = stacks.most_common(1)[0]
                busiest = ", ".join(f"{other} ({n})" for other, n in others.most_common(2))
                started = time.time() - (time.monotonic() - began)
                log.warning(
                    "event loop blocked %d ms (started %s.%03d; on cpu %d, runnable %d, asleep %d "
                    "ms; other threads: %s); %d/%d samples in: %s",
                    blocked * 1000,
                    time.strftime("%H:%M:%S", time.localtime(started)),
                    int(started * 1000) % 1000,
                    on_cpu,
                    runnable,
                    asleep,
                    busiest or "idle",
                    count,
                    sum(stacks.values()),
                    stack,
                )
