"""A bounded pool of threads for the work that blocks: flushes, deletions, segment copies,
remote reads. The event loop hands such work here and never waits on a file itself."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class WorkerPool:
    """``threads`` threads; at most ``max_pending`` pieces of work awaited through ``run`` are
    in the pool at once (a further caller waits its turn on the event loop, so a burst of remote
    reads cannot queue without bound). ``submit`` is for fire-and-forget work from any thread
    (flushes, deletions): it is logged if it fails. Work runs in the order it was handed in
    when there is one thread. With ``nice``, each thread lowers its own priority by that much
    when it starts (Linux's nice value is a thread's own; a thread starts at that of the thread
    whose work started it, the event loop's): for work that can wait while the loop has a core
    to use."""

    def __init__(
        self, name: str, threads: int, max_pending: int | None = None, nice: int = 0
    ) -> None:
        if threads < 1:
            raise ValueError(f"{name}: a pool needs at least one thread, not {threads}")
        self.name = name
        self.threads = threads
        self.max_pending = max_pending or 4 * threads
        self.nice = nice
        self._executor = ThreadPoolExecutor(
            max_workers=threads,
            thread_name_prefix=name,
            initializer=self._lower_priority if nice else None,
        )
        self._slots: asyncio.Semaphore | None = None

    def _lower_priority(self) -> None:
        thread = threading.get_native_id()
        try:
            os.setpriority(
                os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + self.nice
            )
        except OSError as error:  # the work still runs, at the process's priority
            log.warning("%s: its threads keep their priority: %s", self.name, error)

    async def run(self, work: Callable[[], T]) -> T:
        """Runs ``work`` on the pool and returns its result (or raises its exception)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_pending)
        async with self._slots:
            return await asyncio.wrap_future(self._executor.submit(work))

    def submit(self, work: Callable[[], object], what: str = "background work") -> Future:
        def logged() -> None:
            try:
                work()
            except Exception:
                log.exception("%s: %s failed", self.name, what)

        return self._executor.submit(logged)

    def drain(self) -> None:
        """Returns once everything handed in so far has run (exact with one thread)."""
        self._executor.submit(lambda: None).result()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)
