"""Shared fixtures: a manual clock, logs built on it in a temporary directory, one Spark
session; and the groups of tests that pytest-xdist keeps on one worker."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tidelog.clock import ManualClock
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.records.format import Codec, MessageView, Record, build_message_set, iter_deep

# Under `pytest -n N` (make test), the tests of one group run on one worker, in order: a
# module's tests share its module-scoped fixtures (a cluster, a command's run), and the
# container tests share the engine, the images' tags and one compose cluster.
WHOLE_DIRECTORY_GROUPS = ("tests/containers/",)


# Groups that take minutes go first, in this order, so that at the end the short ones fill
# both workers rather than one long group running alone.
LONGEST_FIRST = (
    "tests/containers/",
    "tests/integration/test_readme.py",
    "tests/integration/test_readme_upgrades.py",
    "tests/integration/test_perf_cases.py",
    "tests/integration/test_scale.py",
    "tests/integration/test_spark_cluster.py",
)


def xdist_group(nodeid: str) -> str:
    """The group of a test: its directory where the whole directory is one, else its module."""
    module = nodeid.split("::", 1)[0]
    return next((d for d in WHOLE_DIRECTORY_GROUPS if module.startswith(d)), module)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The LONGEST_FIRST groups first; every other test keeps its collection order."""
    rank = {group: number for number, group in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(xdist_group(item.nodeid), len(rank)))


# Seconds each group took (setup, calls and teardown) and each worker was busy, summed from the
# tests' reports where the run is reported (xdist's controller, or the one process)
GROUP_SECONDS: dict[str, float] = defaultdict(float)
WORKER_SECONDS: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    GROUP_SECONDS[xdist_group(report.nodeid)] += report.duration
    node = getattr(report, "node", None)  # the xdist worker it ran on
    WORKER_SECONDS[node.gateway.id if node is not None else "main"] += report.duration


def pytest_terminal_summary(terminalreporter: object, config: pytest.Config) -> None:
    """The slowest groups and each worker's busy time, after the run: what a rebalance
    (LONGEST_FIRST) or a cut needs to know to keep the suite under its 20 minutes."""
    if not GROUP_SECONDS:
        return
    write = terminalreporter.write_line  # type: ignore[attr-defined]
    write(f"{'=' * 30} slowest groups (setup, calls, teardown) {'=' * 30}")
    for group, seconds in sorted(GROUP_SECONDS.items(), key=lambda item: -item[1])[:15]:
        write(f"{seconds:8.1f}s  {group}")
    busy = ", ".join(
        f"{worker} {seconds:.0f} s" for worker, seconds in sorted(WORKER_SECONDS.items())
    )
    write(f"busy: {busy}; {len(GROUP_SECONDS)} groups")


class _GroupScheduling:
    """pytest-xdist's hook, registered only where xdist runs (``-p no:xdist`` knows no such
    hook, and pytest refuses a conftest that implements one it does not know)."""

    @staticmethod
    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
        """xdist's scope scheduling over these groups (its own --dist loadgroup sets the group
        through a node attribute that pytest 9.2 no longer reads, and so splits modules)."""
        from xdist.scheduler import LoadScopeScheduling

        class GroupScheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return xdist_group(nodeid)

        return GroupScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_GroupScheduling(), "tidelog-group-scheduling")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local Spark session for every test that needs one (starting one takes seconds)."""
    from tidelog.pipeline.session import local_session

    session = local_session(cores=2, app_name="tidelog-tests")
    yield session
    session.stop()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make_log(tmp_path: Path, clock: ManualClock) -> Callable[..., Log]:
    """make_log(**config) opens a log for partition t-0 with the given LogConfig fields."""

    def make(name: str = "t-0", recovery_point: int = 0, needs_recovery: bool = True, **config):
        return Log(
            tmp_path / name,
            LogConfig(**config),
            clock=clock,
            recovery_point=recovery_point,
            needs_recovery=needs_recovery,
        )

    return make


def message_set(
    count: int,
    *,
    magic: int = 1,
    codec: Codec = Codec.NONE,
    timestamp: int | Callable[[int], int] = 0,
    value_size: int = 100,
    key: bytes | None = b"key",
) -> bytes:
    """A producer's message set of ``count`` records; timestamps are a constant or f(i)."""
    stamp = timestamp if callable(timestamp) else (lambda _: timestamp)
    return build_message_set(
        [Record(key, bytes([65 + i % 26]) * value_size, stamp(i)) for i in range(count)],
        magic=magic,
        codec=codec,
    )


def read_everything(log: Log) -> list[MessageView]:
    """Every message of a log, read segment by segment as a consumer would."""
    messages: list[MessageView] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        batch = [m for m in iter_deep(log.read(offset, 10**9).slice.read()) if m.offset >= offset]
        messages += batch
        offset = batch[-1].offset + 1
    return messages
