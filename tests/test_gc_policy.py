"""A serving process's garbage collector: its young threshold, its frozen start-up heap and
its pauses counted. What changes the whole process runs in a process of its own."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref

from tests.conftest import message_set
from tidelog import gc_policy


def run_in_a_process(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_a_serving_process_collects_its_young_generation_every_fifty_thousand_objects() -> None:
    out = run_in_a_process(
        """
        import gc
        from tidelog import gc_policy
        print(gc.get_threshold())
        gc_policy.prepare()
        print(gc.get_threshold())
        """
    )
    assert out.split("\n")[:2] == ["(700, 10, 10)", "(50000, 10, 10)"]


def test_freezing_collects_the_garbage_first_and_later_garbage_is_still_collected() -> None:
    out = run_in_a_process(
        """
        import gc, weakref
        from tidelog import gc_policy

        class Node:
            pass

        def dropped_cycle():
            node = Node()
            node.itself = node
            return weakref.ref(node)

        kept = Node()
        kept.itself = kept
        before = dropped_cycle()
        frozen = gc_policy.freeze_started()
        after = dropped_cycle()
        print(before() is None, frozen > 1000, after() is None)
        gc.collect()
        print(after() is None, gc.get_freeze_count() == frozen, kept.itself is kept)
        """
    )
    assert out.split("\n")[:2] == ["True True False", "True True True"]


def test_each_collections_pause_is_counted_under_its_generation() -> None:
    pauses = gc_policy.CollectorPauses()
    pauses.install()
    try:
        gc.collect(1)
        gc.collect(2)
        gc.collect(2)
    finally:
        pauses.uninstall()
    gc.collect(0)  # not counted once uninstalled

    assert pauses.collections[1:] == [1, 2]
    assert pauses.seconds[2] >= pauses.longest[2] > 0
    assert pauses.longest[1] == pauses.seconds[1] > 0


def test_a_closed_log_is_freed_by_its_last_reference_not_by_the_collector(make_log) -> None:
    # what the freeze relies on for logs opened at start and later deleted or moved away
    partition_log = make_log(segment_bytes=4096)
    for _ in range(20):  # some segments rolled, their indexes written
        partition_log.append_as_leader(message_set(5))
    partition_log.read(0, 1 << 20)
    gc.disable()
    try:
        gone = weakref.ref(partition_log)
        partition_log.close()
        del partition_log
        assert gone() is None
    finally:
        gc.enable()


def test_a_measuring_process_takes_the_threshold_and_the_freeze_at_once() -> None:
    out = run_in_a_process(
        """
        import gc
        from tidelog import gc_policy
        frozen = gc_policy.for_measuring()
        print(gc.get_threshold(), frozen == gc.get_freeze_count() > 1000)
        """
    )
    assert out.split("\n")[0] == "(50000, 10, 10) True"


def test_a_broker_signalled_while_its_admin_api_loads_stops_without_waiting_to_freeze() -> None:
    out = run_in_a_process(
        """
        import asyncio, os, signal
        from tidelog import gc_policy
        from tidelog.controller.broker_node import BrokerNode

        node = BrokerNode.__new__(BrokerNode)  # its start and stop stood in for
        events = []

        async def start():
            node._admin_started = asyncio.get_running_loop().create_future()  # loads forever
            events.append("started")
            asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), signal.SIGTERM)

        async def stop():
            events.append("stopped")

        node.start, node.stop = start, stop
        gc_policy.freeze_started = lambda: events.append("froze") or 0
        asyncio.run(asyncio.wait_for(node.run_until_signalled(), 10))
        print(events)
        """
    )
    assert out.split("\n")[0] == "['started', 'stopped']"
