"""How a process that serves or measures Kafka traffic keeps CPython's cyclic garbage collector
out of its latency.

Reference counting frees almost everything a broker makes per request; the cyclic collector
runs anyway, on counts of objects made. With CPython's defaults (a young collection per 700 new
objects; a full one once the survivors of the middle generation reach a quarter of the old one),
each broker of benchmarks/shape.py (60 partitions, acks=all, 20 MB/s, three brokers on two
cores) ran a full collection every 2.5 to 4 s: 23-42 ms of CPU walking about 53,000 objects,
most of them the modules, classes and functions it imported, freeing none. The collector holds
the GIL throughout, so the event loop stood still for 30-140 ms each time, in every broker, and
the records behind it waited.

The policy, for a process that serves (``tidelog broker``) or measures (below; tests and the
other commands keep CPython's):
- ``prepare()``, before anything starts: a young collection per ``YOUNG_OBJECTS`` new objects
  instead of 700, so fewer of the objects that live as long as a request (an acks=all produce
  waits tens of milliseconds for its followers) are alive at a collection and move on to the
  older generations, whose growth is what brings on the full collections; and the collector's
  pauses counted (``pauses``, on the broker's /metrics). CPython counts the tracked objects
  made less those freed, never below zero, so the count reaches the threshold only when that
  many more objects are alive than at its last zero: a threshold above what the requests a
  broker holds at once keep alive leaves a loaded broker with almost no young collection.
  With 10,000, a broker of benchmarks/shape.py at 600 partitions and acks=all, past what the
  cluster takes (up to 1,000 unanswered requests on its connection, about 27 objects each),
  made 110-113 young collections in a 10 s point, 0.8-0.9 s of its CPU (4-9 ms each, walking
  what the requests in flight hold), about a sixth of what it spent; with 50,000, one, of
  10-40 ms (a young collection now walks up to five times as much when one comes);
- ``freeze_started()``, once the broker serves: a full collection, then ``gc.freeze()``, which
  moves every object left (the imported code, the configuration, the logs opened at start) to a
  permanent generation no later collection walks. Objects made afterwards (a new partition's
  replica, a connection) are collected as before. A frozen object is still freed by reference
  counting; only a cycle of frozen objects dropped later stays in memory. A log opened at start
  and deleted or moved away later is not one: a closed ``Log`` is freed by its last reference.

A process that measures the brokers' latency (``tidelog perf``, ``tidelog scenario``) takes both
at once with ``for_measuring()``, its modules loaded, before it measures: its own collector's
pauses are otherwise read as the brokers' latency. ``tidelog perf produce`` at 20,000 480-byte
records a second to 60 partitions with acks=all ran a full collection of 58-72 ms in each 10 s
run, and its largest latency read 67-79 ms (99.9th percentile 61-74); with the policy, 22 ms
(16-20).
"""

from __future__ import annotations

import gc
import time
from typing import Any

# New (tracked) objects between young collections; CPython's default is 700. The middle and old
# generations' thresholds stay CPython's (10 and 10).
YOUNG_OBJECTS = 50_000
GENERATIONS = (0, 1, 2)


class CollectorPauses:
    """The cyclic collector's pauses in this process since ``install``, per generation: how
    many, their total and their longest, in seconds. A pause is a collection's time on the
    calling thread, the GIL held throughout."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self._started = 0.0

    def install(self) -> None:
        if self._on_collection not in gc.callbacks:
            gc.callbacks.append(self._on_collection)

    def uninstall(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        seconds = time.perf_counter() - self._started
        generation = info["generation"]
        self.collections[generation] += 1
        self.seconds[generation] += seconds
        if seconds > self.longest[generation]:
            self.longest[generation] = seconds


pauses = CollectorPauses()


def prepare() -> None:
    """Sets the young generation's threshold for a serving process and counts the pauses."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS, middle, old)
    pauses.install()


def freeze_started() -> int:
    """Collects everything once, then freezes what is left (see the module's docstring);
    returns the number of objects frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def for_measuring() -> int:
    """The whole policy at once, for a process about to measure; returns the objects frozen."""
    prepare()
    return freeze_started()


def gauges() -> dict[str, Any]:
    """The collector's figures for /metrics, as tidelog.broker.metrics reads its gauges."""

    def per_generation(values: list) -> list[tuple[dict[str, str], float]]:
        return [({"generation": str(g)}, values[g]) for g in GENERATIONS]

    return {
        "tidelog_gc_collections_total": lambda: per_generation(pauses.collections),
        "tidelog_gc_pause_seconds_total": lambda: per_generation(pauses.seconds),
        "tidelog_gc_longest_pause_seconds": lambda: per_generation(pauses.longest),
        "tidelog_gc_frozen_objects": lambda: [({}, gc.get_freeze_count())],
    }
