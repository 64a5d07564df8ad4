"""Processes a local cluster starts, recognised again later by more than their process id.

A process id alone is a weak name: after a crash or a reboot the number may belong to another
program, and signalling it would hit that program. A ``ProcessRecord`` also keeps the process's
start time (``/proc/PID/stat``, clock ticks since boot) and a text its command line contains
(the path of its configuration file, inside the cluster directory); a process is taken to be
the recorded one only when all three agree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child is not alive
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1].split()[0] != "Z"
    except OSError:
        return False


def stop_process(pid: int, timeout: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; returns whether it stopped at the SIGTERM."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return False


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if there is no process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # the fields after the command name, which may itself hold spaces and ')'
            return int(stat.read().rpartition(")")[2].split()[19])
    except (OSError, IndexError, ValueError):
        return None


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float | None:
    """The CPU a process has used (utime + stime, all its threads); None when there is no such
    process (it has ended, or there was none)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def cpu_used_between(before: Mapping[int, float], after: Mapping[int, float]) -> float:
    """CPU seconds used between two readings of processes' CPU (process id -> cpu_seconds): a
    process started in between counts from its start; one that ended in between is not counted
    (it can no longer be read), so a restart makes the figure a lower bound."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def processes_with(marker: str) -> list[int]:
    """The live processes, this one aside, whose command line holds ``marker``."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            pid = int(entry.name)
            if pid != os.getpid() and marker in command_line(pid) and process_alive(pid):
                found.append(pid)
    return found


@dataclass(frozen=True)
class ProcessRecord:
    """A process this cluster started: its id, its start time and a text its command line
    holds. ``running()`` is true only for that very process, never for a reused id."""

    pid: int
    started: int | None
    marker: str

    @classmethod
    def of(cls, pid: int, marker: str) -> ProcessRecord:
        return cls(pid, start_time(pid), marker)

    def running(self) -> bool:
        if not process_alive(self.pid):
            return False
        if self.started is not None and start_time(self.pid) != self.started:
            return False
        return self.marker in command_line(self.pid)

    def stop(self, timeout: float = 10.0) -> bool:
        """SIGTERM then SIGKILL, only if this is still the recorded process; returns whether it
        stopped at the SIGTERM (True also when it was not running)."""
        if not self.running():
            return True
        return stop_process(self.pid, timeout)

    def signal(self, signum: int) -> None:
        if self.running():
            os.kill(self.pid, signum)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, document: dict[str, Any] | None) -> ProcessRecord | None:
        return cls(**document) if document else None
