"""Carries out an upgrade plan one broker at a time, with a JSON journal that makes it resumable.

Each step: a clean shutdown, the new settings written, a start, then a wait until every replica
is back in its ISR (zero under-replicated partitions). After a phase's last step, leadership
goes back to the preferred replicas and each replica's end offset is marked; the messages
appended after that mark must carry the phase's format (checked from the segment bytes when
the next phase starts, and at the end). The first failed check stops the run: the journal says
which step, why, and how the cluster stood, and the same command resumes from that step.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidelog.cluster.local import ClusterError
from tidelog.cluster.rolling import RollableCluster
from tidelog.config import ConfigError
from tidelog.files import replace_text
from tidelog.upgrade import checks
from tidelog.upgrade.plan import Step, plan, read_settings

JOURNAL = "upgrade-journal.json"


class UpgradeFailed(RuntimeError):
    """A step or check failed; the journal holds the report."""


class Journal:
    """The run's steps with their status, each phase's timing and format check, and the run's
    state (running, failed, done); written whole (through a temporary file) at every change."""

    def __init__(self, path: Path, document: dict[str, Any]) -> None:
        self.path = path
        self.document = document
        self.steps = [Step.from_json(step) for step in document["steps"]]

    @classmethod
    def load(cls, path: Path) -> Journal | None:
        if not path.exists():
            return None
        return cls(path, json.loads(path.read_text()))

    @classmethod
    def new(cls, path: Path, target: str, steps: list[Step]) -> Journal:
        document = {
            "target": target,
            "state": "running",
            "created": time.time(),
            "steps": [step.to_json() for step in steps],
            "phases": {},
            "log": [],
        }
        return cls(path, document)

    @property
    def phases(self) -> dict[str, dict]:
        return self.document["phases"]

    def note(self, line: str) -> None:
        self.document["log"].append({"time": time.time(), "text": line})

    def save(self) -> None:
        self.document["steps"] = [step.to_json() for step in self.steps]
        write_journal(self.path, self.document)


def write_journal(path: Path, document: dict[str, Any]) -> None:
    """Replaces the journal whole (through a temporary file): a crash leaves the old or the new."""
    replace_text(path, json.dumps(document, indent=2))


def unfinished_run(cluster: RollableCluster) -> str | None:
    """The target of an `upgrade run` that has not finished, if there is one."""
    journal = Journal.load(cluster.directory / JOURNAL)
    if journal is None or journal.document["state"] == "done":
        return None
    return str(journal.document["target"])


class UpgradeRun:
    """Runs (or resumes) the upgrade of ``cluster`` to ``target``."""

    def __init__(
        self,
        cluster: RollableCluster,
        target: str,
        *,
        timeout: float = 120.0,
        settle_seconds: float = 0.0,
        progress: Callable[[str], None] = print,
    ) -> None:
        self.cluster = cluster
        self.target = target
        self.timeout = timeout
        self.settle_seconds = settle_seconds
        self.progress = progress
        self.path = cluster.directory / JOURNAL

    def steps(self) -> tuple[list[Step], bool]:
        """The steps to run and whether they resume an unfinished journal."""
        journal = Journal.load(self.path)
        unfinished = journal is not None and journal.document["state"] != "done"
        if journal is not None and unfinished and journal.document["target"] == self.target:
            return journal.steps, True
        return plan(read_settings(self.cluster), self.target), False

    def run(self) -> Journal:
        """Every step not done yet, in order. Raises UpgradeFailed at the first failure."""
        steps, resuming = self.steps()
        journal = Journal.load(self.path) if resuming else None
        if journal is None:
            journal = Journal.new(self.path, self.target, steps)
        journal.document["state"] = "running"
        self._say(journal, "resuming the upgrade" if resuming else f"upgrading to {self.target}")
        journal.save()
        total = len(journal.steps)
        for number, step in enumerate(journal.steps, start=1):
            phase = journal.phases.setdefault(step.phase, {})
            if step.status != "done":
                if "started" not in phase:
                    self._check_previous_format(journal, step.phase)
                    phase["started"] = time.time()
                self._run_step(journal, step, number, total)
            # a run stopped after a phase's last step finishes that phase when resumed
            phase_done = all(s.status == "done" for s in journal.steps if s.phase == step.phase)
            if phase_done and "seconds" not in phase:
                self._finish_phase(journal, step)
        if self.settle_seconds:
            time.sleep(self.settle_seconds)  # new messages to check the last phase's format on
        self._check_previous_format(journal, None)
        journal.document["state"] = "done"
        self._say(journal, f"the cluster runs {self.target}: every step done")
        journal.save()
        return journal

    def _run_step(self, journal: Journal, step: Step, number: int, total: int) -> None:
        step.status = "started"
        step.detail = {"started": time.time()}
        self._say(journal, f"[{number}/{total}] {step.describe()}")
        journal.save()
        try:
            self.cluster.restart_broker(
                step.broker_id, step.settings, timeout=self.timeout, progress=self.progress
            )
            checks.wait_in_sync(self.cluster, self.timeout)
        except (ClusterError, ConfigError, TimeoutError) as error:
            self._fail(journal, step, f"step {number}/{total} ({step.describe()}): {error}")
        step.status = "done"
        step.detail["seconds"] = round(time.time() - step.detail["started"], 3)
        self._say(
            journal,
            f"broker {step.broker_id} is back in every ISR; no under-replicated partitions "
            f"({step.detail['seconds']} s)",
        )
        journal.save()

    def _finish_phase(self, journal: Journal, step: Step) -> None:
        phase = journal.phases[step.phase]
        try:
            checks.elect_preferred_leaders(self.cluster, self.timeout)
            checks.wait_in_sync(self.cluster, self.timeout)
        except (TimeoutError, ClusterError) as error:
            self._fail(journal, step, f"after {step.phase}: {error}")
        phase["seconds"] = round(time.time() - phase["started"], 3)
        phase["format"] = step.format_after
        phase["marks"] = checks.end_offsets(self.cluster)
        journal.document["last_phase"] = step.phase
        self._say(journal, f"{step.phase} done in {phase['seconds']} s; leaders preferred")
        journal.save()

    def _check_previous_format(self, journal: Journal, starting: str | None) -> None:
        """The messages appended since the last finished phase have that phase's format."""
        last = journal.document.get("last_phase")
        if last is None or last == starting or "checked" in journal.phases[last]:
            return
        phase = journal.phases[last]
        expected = checks.expected_formats(self.cluster, phase["format"])
        found = checks.formats_since(self.cluster, phase["marks"])
        wrong = {
            replica: counts
            for replica, counts in found.items()
            if set(counts) != {expected.get(replica.split("/")[0], phase["format"])}
        }
        messages = sum(sum(counts.values()) for counts in found.values())
        phase["checked"] = {"replicas": len(found), "messages": messages, "wrong": wrong}
        if wrong:
            step = next(s for s in journal.steps if s.phase == last)
            self._fail(journal, step, f"after {last}: new messages in the wrong format: {wrong}")
        self._say(
            journal,
            f"{last}: {messages} messages appended since on {len(found)} replicas, each in "
            f"format v{phase['format']} (topic overrides aside) as expected"
            if messages
            else f"{last}: no messages appended since the phase ended; no format to check",
        )
        journal.save()

    def _fail(self, journal: Journal, step: Step, reason: str) -> None:
        step.status = "failed"
        state = self.cluster_state()
        journal.document["state"] = "failed"
        journal.document["failure"] = {"reason": reason, "cluster": state}
        self._say(journal, f"stopped: {reason}")
        journal.save()
        raise UpgradeFailed(
            f"{reason}\ncluster state: {json.dumps(state)}\nthe journal is {self.path}; "
            "the same command resumes from this step"
        )

    def cluster_state(self) -> dict:
        return cluster_state(self.cluster)

    def _say(self, journal: Journal, line: str) -> None:
        journal.note(line)
        self.progress(line)


def cluster_state(cluster: RollableCluster) -> dict:
    """How the cluster stands, for a failure report: brokers, settings, lagging partitions."""
    rows = cluster.status()
    try:
        under, leaderless = checks.lagging(cluster)
    except Exception as error:  # ZooKeeper itself may be what failed
        under, leaderless = [f"unknown: {error}"], []
    return {
        "brokers": {
            row["broker"]: ("registered" if row["registered"] else "not registered") for row in rows
        },
        "settings": [vars(b) for b in read_settings(cluster)],
        "under_replicated": under,
        "leaderless": leaderless,
    }
