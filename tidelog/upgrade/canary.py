"""`tidelog upgrade canary|rollback`: one broker tried on the next message format, and taken back.

Two format steps (FORMAT_STEPS), chosen by the format the whole cluster runs: v0 to v1 (0.9.0 to
0.10.0, after phase 1 of the upgrade to 0.10: 0.10 code, inter.broker.protocol.version
0.10.0-IV0 or later) and v1 to v2 (0.10.0 to 2.1, after phase 1 of the upgrade to 2.1: 2.1 code,
inter.broker.protocol.version 2.1).

Canary: it keeps preferred leadership of at most ``leaders`` partitions (the others get their
replicas reordered so another broker comes first; no data moves), leadership goes to the
preferred replicas, and the canary restarts with the new log.message.format.version. Messages
appended afterwards to the partitions it leads are in the new format on every replica
(followers copy their leader's bytes); all others stay in the old one. Topics with their own
format keep it.

Rollback, as the design has it: stop the canary, delete its copies of the partitions it led,
set the old format, restart, let it re-replicate from the new leaders; the replica order from
before the canary is given back. New messages on it are in the old format again. What the
canary wrote in the new format is not un-written: the other replicas hold the same bytes, so
the canary copies them back, and they stay on every replica until retention removes them. For
v2 that is safe because the broker keeps 2.1's code and protocol (a rollback takes back the
format, not the code): it serves those v2 batches as they are to v2 fetchers (Fetch v4 and
later) and down-converts them to v1 for older fetchers (Fetch v0-v3), as Kafka does.

Both keep a journal (DIR/upgrade-canary.json): a step is written "started" before it acts and
"done" after, and every step is safe to run again, so a run killed at any point is resumed by
the same command. A replica's data is deleted by renaming its directory to a name the broker
does not load, then removing that; a deletion cut short is finished on resume.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from tidelog.cluster.local import ClusterError, LocalCluster, wait_until
from tidelog.config import BROKER_RELEASES, MESSAGE_FORMAT_VERSIONS, ConfigError, broker_config
from tidelog.controller import zookeeper
from tidelog.upgrade import checks
from tidelog.upgrade.plan import FORMAT_KEY, FORMAT_ORDER, PROTOCOL_ORDER, read_settings
from tidelog.upgrade.run import UpgradeFailed, cluster_state, unfinished_run, write_journal

CANARY_JOURNAL = "upgrade-canary.json"


@dataclass(frozen=True)
class FormatStep:
    """A canary's change of log.message.format.version, ``old`` to ``new``: every broker
    must run release ``release`` or later with inter.broker.protocol.version ``protocol`` or
    later (phase 1 of the upgrade to ``release``) before a canary may go to ``new``."""

    old: str
    new: str
    release: str
    protocol: str

    @property
    def old_magic(self) -> int:
        return MESSAGE_FORMAT_VERSIONS[self.old]

    @property
    def new_magic(self) -> int:
        return MESSAGE_FORMAT_VERSIONS[self.new]


FORMAT_STEPS = (
    FormatStep("0.9.0", "0.10.0", "0.10.0", "0.10.0-IV0"),
    FormatStep("0.10.0", "2.1", "2.1", "2.1"),
)
DELETED_SUFFIX = ".rollback-delete"  # not topic-N: a log manager never loads it
Partition = tuple[str, int]


class CanaryRefused(ValueError):
    """The cluster is not in a state the canary or rollback starts from; nothing was done."""


def name(partition: Partition) -> str:
    return f"{partition[0]}-{partition[1]}"


def parse(text: str) -> Partition:
    topic, _, number = text.rpartition("-")
    return topic, int(number)


@dataclass(frozen=True)
class CanaryStep:
    """One step of a canary or rollback: ``act`` does it (and is safe to run again)."""

    name: str
    act: Callable[[CanaryRun], str]


class CanaryJournal:
    """The run's kind ("canary" or "rollback"), broker, state (running, failed, done), each
    step's status (pending, started, done, failed), and what later steps need (the replica order
    from before the canary, the partitions it kept or led, end offsets marked on each replica).
    Written whole at every change."""

    def __init__(self, path: Path, document: dict[str, Any]) -> None:
        self.path = path
        self.document = document

    @classmethod
    def load(cls, path: Path) -> CanaryJournal | None:
        return cls(path, json.loads(path.read_text())) if path.exists() else None

    @property
    def unfinished(self) -> bool:
        return self.document["state"] != "done"

    @property
    def kind(self) -> str:
        return str(self.document["kind"])

    @property
    def broker_id(self) -> int:
        return int(self.document["broker"])

    @property
    def data(self) -> dict[str, Any]:
        return self.document["data"]

    def status(self, step: str) -> str:
        return str(self.document["steps"][step])

    def set_status(self, step: str, status: str) -> None:
        self.document["steps"][step] = status
        self.save()

    def note(self, line: str) -> None:
        self.document["log"].append({"time": time.time(), "text": line})

    def save(self) -> None:
        write_journal(self.path, self.document)


class CanaryRun:
    """Runs (or resumes) the canary or the rollback (``kind``) of broker ``broker_id``.

    ``crash_at``, when set, is called with the step's name each time a step starts (after the
    journal says so) and between the renames and removals of a deletion: a test makes it raise
    to stop the run there as a kill would."""

    def __init__(
        self,
        cluster: LocalCluster,
        kind: str,
        broker_id: int,
        *,
        leaders: int = 1,
        timeout: float = 120.0,
        settle_seconds: float = 0.0,
        progress: Callable[[str], None] = print,
        crash_at: Callable[[str], None] | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r}: allowed: {', '.join(KINDS)}")
        self.cluster = cluster
        self.kind = kind
        self.broker_id = broker_id
        self.leaders = leaders
        self.timeout = timeout
        self.settle_seconds = settle_seconds
        self.progress = progress
        self.crash_at = crash_at
        self.path = cluster.directory / CANARY_JOURNAL
        self.journal: CanaryJournal | None = None

    @property
    def steps(self) -> list[CanaryStep]:
        return KINDS[self.kind]

    # -- starting or resuming ------------------------------------------------------------------

    def resumable(self) -> CanaryJournal | None:
        """The unfinished journal of this same kind and broker, if there is one."""
        journal = CanaryJournal.load(self.path)
        if journal is None or not journal.unfinished:
            return None
        if journal.kind == self.kind and journal.broker_id == self.broker_id:
            return journal
        return None

    def refusal(self) -> str | None:
        """Why this run may not start (None: it may); nothing is changed. A run that resumes
        its own journal may always go on."""
        try:
            self.cluster.broker(self.broker_id)
        except ClusterError as error:
            return str(error)
        if self.resumable() is not None:
            return None
        return self._other_run() or self._settings_refusal() or self._cluster_refusal()

    def _other_run(self) -> str | None:
        """An unfinished upgrade run, canary or rollback that is not this one's to take over."""
        target = unfinished_run(self.cluster)
        if target is not None:
            return (
                f"an upgrade run to {target} is unfinished ({self.cluster.directory}/"
                f"upgrade-journal.json): finish it with `tidelog upgrade run --to {target}` first"
            )
        other = CanaryJournal.load(self.path)
        if other is None or not other.unfinished:
            return None
        if self.kind == "rollback" and other.broker_id == self.broker_id:
            return None  # a rollback may take over its own broker's unfinished canary
        return (
            f"an unfinished {other.kind} of broker {other.broker_id} ({self.path}): "
            f"`tidelog upgrade {other.kind} {other.broker_id} --dir "
            f"{self.cluster.directory}` finishes it first"
        )

    def format_step(self) -> FormatStep | None:
        """The format step of this run: journaled by a run under way; else, for a canary,
        the step whose old format every broker runs, and for a rollback the step whose new
        format the broker runs (None: no step fits; _settings_refusal says why)."""
        for journal in (self.journal, self.resumable()):
            if journal is not None and "format_step" in journal.data:
                return next(f for f in FORMAT_STEPS if f.new == journal.data["format_step"])
        formats = {b.broker_id: b.message_format for b in read_settings(self.cluster)}
        if self.kind == "rollback":
            mine = formats[self.broker_id]
            return next((f for f in FORMAT_STEPS if f.new == mine), None)
        others = {f for b, f in formats.items() if b != self.broker_id}
        return next((f for f in FORMAT_STEPS if others == {f.old}), None)

    def _settings_refusal(self) -> str | None:
        """From each broker's server.properties: phase 1 done, and one canary at most."""
        brokers = read_settings(self.cluster)
        formats = {b.broker_id: b.message_format for b in brokers}
        mine = formats[self.broker_id]
        step = self.format_step()
        if self.kind == "rollback":
            if step is None:
                return f"broker {self.broker_id} is not a canary: it runs {FORMAT_KEY}={mine}"
            others_new = [b for b, f in formats.items() if f != step.old and b != self.broker_id]
            if others_new and all(formats[b] == mine for b in formats):
                return (
                    f"broker {self.broker_id} is not a canary: every broker runs {FORMAT_KEY}="
                    f"{mine} (a rollback takes back one canary, on a cluster whose other brokers "
                    "run the format before it)"
                )
            if others_new:
                return (
                    f"broker {others_new[0]} runs {FORMAT_KEY}={formats[others_new[0]]} too: a "
                    f"rollback takes back one canary on a cluster at format {step.old}, not a "
                    "phase 2 under way"
                )
            return None
        if step is None:
            others = {b: f for b, f in formats.items() if b != self.broker_id}
            oldest = min(others.values(), key=FORMAT_ORDER.index)
            newer = [b for b, f in others.items() if f != oldest]
            if newer:
                return (
                    f"broker {newer[0]} runs {FORMAT_KEY}={others[newer[0]]}: one canary at a "
                    f"time, on a cluster at format {oldest}"
                )
            return (
                f"the cluster runs {FORMAT_KEY}={oldest}: a canary starts from a cluster at "
                f"one of {', '.join(f.old for f in FORMAT_STEPS)}"
            )
        not_new = [
            f"broker {b.broker_id} runs broker.protocol.max.version={b.release}, "
            f"inter.broker.protocol.version={b.protocol}"
            for b in brokers
            if BROKER_RELEASES.index(b.release) < BROKER_RELEASES.index(step.release)
            or PROTOCOL_ORDER.index(b.protocol) < PROTOCOL_ORDER.index(step.protocol)
        ]
        if not_new:
            return (
                f"phase 1 is not done: {'; '.join(not_new)}. A canary on {FORMAT_KEY}="
                f"{step.new} needs every broker on {step.release} code with "
                f"inter.broker.protocol.version {step.protocol} or later (phase 1 of "
                f"`tidelog upgrade plan --to {step.release}`)"
            )
        if mine != step.old:
            return (
                f"broker {self.broker_id} is already on {FORMAT_KEY}={mine}: it is the canary "
                f"already (`tidelog upgrade rollback {self.broker_id}` takes it back)"
            )
        return None

    def _cluster_refusal(self) -> str | None:
        """From the running cluster: a canary starts from every broker registered, every
        replica in sync, and no partition whose only replica is the canary (a rollback could
        not rebuild it); a rollback from every partition led (its canary may be down)."""
        under, leaderless = checks.lagging(self.cluster)
        if self.kind == "rollback":
            return (
                f"partitions without a leader: {'; '.join(leaderless[:5])}" if leaderless else None
            )
        missing = sorted(set(self.cluster.broker_ids) - self.cluster.registered_brokers())
        if missing:
            return f"brokers {missing} are not registered: a canary starts from a whole cluster"
        if under or leaderless:
            return f"the cluster is not in sync: {'; '.join((under + leaderless)[:5])}"
        alone = [name(p) for p, r in self._assignment().items() if r == [self.broker_id]]
        if alone:
            return (
                f"{', '.join(alone[:5])}: broker {self.broker_id} is the only replica, so a "
                "rollback (which deletes the data of the partitions it led) could not "
                "re-replicate it"
            )
        return None

    def describe(self) -> list[str]:
        """The steps still to do, each in words (what --dry-run prints)."""
        journal = self.resumable()
        self.journal = journal or self._new_journal()  # what a run would start from; unsaved
        lines = []
        for step in self.steps:
            if journal is not None and journal.status(step.name) == "done":
                continue
            lines.append(f"{step.name}{self._preview(step.name, journal)}")
        return lines

    def run(self) -> CanaryJournal:
        """Every step not done yet, in order; UpgradeFailed at the first failure (the journal
        says where), CanaryRefused if the run may not start."""
        journal = self.resumable()
        if journal is None:
            reason = self.refusal()
            if reason is not None:
                raise CanaryRefused(reason)
            journal = self._new_journal()
            self.journal = journal
            change_of = self.format_step()
            assert change_of is not None  # the refusal says why there is none
            change = (
                f"{change_of.old} to {change_of.new}"
                if self.kind == "canary"
                else f"{change_of.new} back to {change_of.old}"
            )
            self._say(
                f"{self.kind} of broker {self.broker_id}, {FORMAT_KEY} {change}: "
                f"{len(self.steps)} steps"
            )
        else:
            self.journal = journal
            self._say(f"resuming the {self.kind} of broker {self.broker_id}")
        journal.document["state"] = "running"
        journal.save()
        for number, step in enumerate(self.steps, start=1):
            if journal.status(step.name) == "done":
                continue
            self._say(f"[{number}/{len(self.steps)}] {step.name}")
            journal.set_status(step.name, "started")
            self._crash_point(step.name)
            try:
                said = step.act(self)
                self._crash_point(f"{step.name}: acted")
            except (ClusterError, ConfigError, TimeoutError, OSError, StepFailed) as error:
                self._fail(step.name, f"step {number}/{len(self.steps)} ({step.name}): {error}")
            journal.set_status(step.name, "done")
            self._say(said)
        journal.document["state"] = "done"
        self._say(f"the {self.kind} of broker {self.broker_id} is done")
        journal.save()
        return journal

    def _new_journal(self) -> CanaryJournal:
        data: dict[str, Any] = {}
        previous = CanaryJournal.load(self.path)
        if (
            self.kind == "rollback"
            and previous is not None
            and previous.kind == "canary"
            and previous.broker_id == self.broker_id
        ):
            # a rollback gives back the replica order its canary found
            for key in ("assignment_before", "kept", "restart_marks"):
                if key in previous.data:
                    data[key] = previous.data[key]
        step = self.format_step()
        if step is not None:
            data["format_step"] = step.new
        document = {
            "kind": self.kind,
            "broker": self.broker_id,
            "state": "running",
            "created": time.time(),
            "steps": {step.name: "pending" for step in self.steps},
            "data": data,
            "log": [],
        }
        return CanaryJournal(self.path, document)

    # -- the broker and its data (one place, so another executor can stand in) ----------------

    def _restart_with_format(self, message_format: str) -> str:
        """Restarts the broker with ``message_format`` unless it already runs with it."""
        settings = broker_config(self.cluster.broker_settings(self.broker_id))
        if settings[FORMAT_KEY] == message_format and self.cluster.is_registered(self.broker_id):
            return f"broker {self.broker_id} already runs {FORMAT_KEY}={message_format}"
        self.cluster.restart_broker(
            self.broker_id,
            {FORMAT_KEY: message_format},
            timeout=self.timeout,
            progress=self.progress,
        )
        return f"broker {self.broker_id} restarted with {FORMAT_KEY}={message_format}"

    def _running(self) -> bool:
        return self.cluster.broker(self.broker_id).alive

    def _stop(self) -> None:
        """A clean shutdown, if it runs."""
        if self._running():
            self.cluster.stop_broker(self.broker_id)

    def _ensure_running(self) -> None:
        """Starts the broker if it is not running (it was killed, or a run stopped after its
        shutdown)."""
        if not self._running():
            self.progress(f"broker {self.broker_id} is not running: starting it")
            self.cluster.start_broker(self.broker_id, timeout=self.timeout)

    def _replica_dirs(self, partition: Partition) -> Iterator[Path]:
        """The broker's directories that hold (or held, set aside for deletion) ``partition``."""
        for log_dir in broker_config(self.cluster.broker_settings(self.broker_id))["log.dirs"]:
            yield Path(log_dir) / name(partition)

    # -- ZooKeeper -----------------------------------------------------------------------------

    def _assignment(self) -> dict[Partition, list[int]]:
        with zookeeper.session(self.cluster.zookeeper) as client:
            cache = zookeeper.read_cluster(client)
        return {
            (topic, number): list(replicas)
            for topic, metadata in cache.topics.items()
            for number, replicas in metadata.assignment.items()
        }

    def _reorder(self, order: dict[Partition, list[int]]) -> int:
        """Writes ``order`` where it differs from ZooKeeper's; the number of partitions changed."""
        now = self._assignment()
        changed: dict[str, dict[int, list[int]]] = {}
        for partition, replicas in order.items():
            if partition in now and now[partition] != replicas:
                changed.setdefault(partition[0], {})[partition[1]] = replicas
        with zookeeper.session(self.cluster.zookeeper) as client:
            for topic, assignment in sorted(changed.items()):
                zookeeper.reorder_replicas(client, topic, assignment)
        return sum(len(a) for a in changed.values())

    def _canary_order(self) -> tuple[dict[Partition, list[int]], list[Partition]]:
        """The replica order that leaves the broker preferred leader of at most ``leaders``
        partitions (the first ones by name), and those it keeps."""
        before = self._order_before()
        first = sorted(p for p, replicas in before.items() if replicas[0] == self.broker_id)
        kept = first[: self.leaders]
        order = {}
        for partition, replicas in before.items():
            if partition in first and partition not in kept:
                order[partition] = [*replicas[1:], replicas[0]]  # the next replica leads
            else:
                order[partition] = list(replicas)
        return order, kept

    def _order_before(self) -> dict[Partition, list[int]]:
        journal = self.journal
        if journal is not None and "assignment_before" in journal.data:
            return {parse(k): v for k, v in journal.data["assignment_before"].items()}
        return self._assignment()

    def _led(self) -> list[Partition]:
        """The partitions the canary led: those it leads now, those it kept as preferred
        leader, and those whose copy on it holds messages in the new format appended since its
        restart on it (the whole log when that is not journaled), topics that keep their own
        format aside."""
        journal = self.journal
        data = journal.data if journal is not None else {}
        found = {
            p for p, (leader, _) in checks.leaders(self.cluster).items() if leader == self.broker_id
        }
        found |= {parse(text) for text in data.get("kept", [])}
        marks = data.get("restart_marks")
        step = self.format_step()
        assert step is not None
        before = checks.expected_formats(self.cluster, step.old_magic)
        after = checks.expected_formats(self.cluster, step.new_magic)
        overridden = {topic for topic, magic in after.items() if before[topic] == magic}
        for (topic, number, broker_id), directory in checks.partition_dirs(self.cluster).items():
            if broker_id != self.broker_id or topic in overridden:
                continue
            since = 0 if marks is None else marks.get(f"{topic}/{number}/{broker_id}", 0)
            if any(magic == step.new_magic for _, magic in checks.entries(directory, since)):
                found.add((topic, number))
        existing = self._assignment()
        return sorted(p for p in found if p in existing)

    def _preview(self, step: str, journal: CanaryJournal | None) -> str:
        """What a step would do, for --dry-run (only where the cluster says more)."""
        if step == MOVE_LEADERSHIP:
            order, kept = self._canary_order()
            before = self._order_before()
            moved = [f"{name(p)} -> {order[p]}" for p in sorted(order) if order[p] != before[p]]
            return (
                f": it keeps {', '.join(map(name, kept)) or 'none'}; replicas reordered: "
                f"{', '.join(moved) or 'none'}"
            )
        if step == DELETE:
            led = journal.data["led"] if journal is not None and "led" in journal.data else None
            partitions = [parse(p) for p in led] if led is not None else self._led()
            paths = [str(d) for p in partitions for d in self._replica_dirs(p)]
            return f": {', '.join(paths) or 'nothing (it led no partition)'}"
        return ""

    # -- journal and words ---------------------------------------------------------------------

    def _crash_point(self, where: str) -> None:
        if self.crash_at is not None:
            self.crash_at(where)

    def _fail(self, step: str, reason: str) -> NoReturn:
        journal = self.journal
        assert journal is not None
        journal.document["steps"][step] = "failed"
        journal.document["state"] = "failed"
        state = cluster_state(self.cluster)
        journal.document["failure"] = {"reason": reason, "cluster": state}
        self._say(f"stopped: {reason}")
        journal.save()
        raise UpgradeFailed(
            f"{reason}\ncluster state: {json.dumps(state)}\nthe journal is {self.path}; "
            "the same command resumes from this step"
        )

    def _say(self, line: str) -> None:
        if self.journal is not None:
            self.journal.note(line)
            self.journal.save()
        self.progress(line)


class StepFailed(RuntimeError):
    """A step found the cluster not as it must be to go on."""


# -- the canary's steps ------------------------------------------------------------------------


def move_leadership(run: CanaryRun) -> str:
    journal = run.journal
    assert journal is not None
    if "assignment_before" not in journal.data:  # journaled before anything is written
        journal.data["assignment_before"] = {name(p): r for p, r in run._assignment().items()}
        journal.save()
    order, kept = run._canary_order()
    journal.data["kept"] = [name(p) for p in kept]
    journal.save()
    run._reorder(order)
    before = run._order_before()
    moved = [f"{name(p)} {order[p]}" for p in sorted(order) if order[p] != before[p]]
    return (
        f"broker {run.broker_id} stays preferred leader of {len(kept)} partitions "
        f"({', '.join(map(name, kept)) or 'none'}); reordered so another replica comes first: "
        f"{', '.join(moved) or 'none'}"
    )


def elect_preferred(run: CanaryRun) -> str:
    checks.elect_preferred_leaders(run.cluster, run.timeout)
    led = [p for p, (leader, _) in checks.leaders(run.cluster).items() if leader == run.broker_id]
    return f"every partition led by its preferred replica; broker {run.broker_id} leads {len(led)}"


def restart_on_new(run: CanaryRun) -> str:
    journal = run.journal
    step = run.format_step()
    assert journal is not None and step is not None
    if "restart_marks" not in journal.data:  # where its new messages may start, for a rollback
        journal.data["restart_marks"] = checks.end_offsets(run.cluster)
        journal.save()
    return run._restart_with_format(step.new)


def settle_and_mark(run: CanaryRun) -> str:
    """The broker running, in every ISR, leading what it is preferred for; then each replica's
    end offset and each partition's leader journaled for the format check."""
    journal = run.journal
    assert journal is not None
    run._ensure_running()
    checks.wait_in_sync(run.cluster, run.timeout)
    checks.elect_preferred_leaders(run.cluster, run.timeout)
    mark(run)
    return f"broker {run.broker_id} is back in every ISR and leads its preferred partitions"


def mark(run: CanaryRun) -> None:
    """Journals each partition's leader and, for every replica of it, the leader's end offset
    (the furthest copy): every message from there on is appended by that leader, even on a
    follower that still lags behind the mark."""
    journal = run.journal
    assert journal is not None
    ends = checks.end_offsets(run.cluster)
    furthest: dict[str, int] = {}
    for replica, end in ends.items():
        partition = replica.rpartition("/")[0]
        furthest[partition] = max(furthest.get(partition, 0), end)
    journal.data["marks"] = {replica: furthest[replica.rpartition("/")[0]] for replica in ends}
    journal.data["leaders"] = {name(p): list(v) for p, v in checks.leaders(run.cluster).items()}
    journal.save()


def check_formats(run: CanaryRun) -> str:
    """The messages appended since the mark: in the new format on every replica of a partition
    the canary leads, in the old one on every replica of the others (each topic's format as
    checks.expected_formats gives it for the brokers' old and new format: a topic with its own
    format, or compacted on a v2 broker, keeps one). A partition whose leader changed in
    between is left out and named."""
    journal = run.journal
    step = run.format_step()
    assert journal is not None and step is not None
    run._ensure_running()
    if run.settle_seconds:
        time.sleep(run.settle_seconds)  # new messages to read the format of
    canary = run.kind == "canary"
    marked_leaders = {parse(k): tuple(v) for k, v in journal.data["leaders"].items()}
    now = checks.leaders(run.cluster)
    moved = sorted(p for p, leader in marked_leaders.items() if now.get(p) != leader)
    old_formats = checks.expected_formats(run.cluster, step.old_magic)
    new_formats = checks.expected_formats(run.cluster, step.new_magic)
    found = checks.formats_since(run.cluster, journal.data["marks"])
    wrong: dict[str, dict] = {}
    counted = {step.old_magic: 0, step.new_magic: 0}
    for replica, counts in found.items():
        topic, number, _ = replica.split("/")
        partition = (topic, int(number))
        if partition in moved:
            continue
        on_canary = canary and marked_leaders[partition][0] == run.broker_id
        expected = (new_formats if on_canary else old_formats).get(topic, step.old_magic)
        if set(counts) != {expected}:
            wrong[replica] = {"expected": expected, "found": counts}
        for magic, n in counts.items():
            counted[magic] = counted.get(magic, 0) + n
    journal.data["checked"] = {
        "messages": {f"v{magic}": n for magic, n in counted.items()},
        "wrong": wrong,
        "leader_moved": moved,
    }
    journal.save()
    if wrong:
        raise StepFailed(f"new messages in the wrong format: {json.dumps(wrong)[:2000]}")
    skipped = f"; {len(moved)} partitions changed leader meanwhile, left out" if moved else ""
    if not found:
        return f"no messages appended since the mark: no format to check{skipped}"
    old, new = step.old_magic, step.new_magic
    if canary:
        return (
            f"{counted[new]} messages in format v{new} on the replicas of the partitions broker "
            f"{run.broker_id} leads, {counted[old]} in format v{old} elsewhere{skipped}"
        )
    return (
        f"{counted[old]} new messages, every one in format v{old} on every replica (topics "
        f"that keep their own format aside){skipped}"
    )


# -- the rollback's steps ----------------------------------------------------------------------


def record_led(run: CanaryRun) -> str:
    journal = run.journal
    assert journal is not None
    if "led" not in journal.data:
        journal.data["led"] = [name(p) for p in run._led()]
        journal.save()
    led = [parse(p) for p in journal.data["led"]]
    return (
        f"broker {run.broker_id} led {len(led)} partitions as the canary: "
        f"{', '.join(map(name, led)) or 'none'}"
    )


def stop_broker(run: CanaryRun) -> str:
    """A clean shutdown, then a wait until another in-sync replica leads each partition it led
    (so its copies are not the only ones left)."""
    journal = run.journal
    assert journal is not None
    run._stop()
    led = [parse(p) for p in journal.data["led"]]
    last: list[str] = []

    def taken_over() -> bool:
        now = checks.leaders(run.cluster)
        registered = run.cluster.registered_brokers()
        last[:] = [
            name(p)
            for p in led
            if p in now and (now[p][0] == run.broker_id or now[p][0] not in registered)
        ]
        return not last

    try:
        wait_until(taken_over, run.timeout, "another replica to lead each partition it led", 0.5)
    except ClusterError as error:
        raise StepFailed(
            f"{error}: no other in-sync replica leads {', '.join(last[:5])}; its copies there "
            "are not deleted"
        ) from None
    return f"broker {run.broker_id} stopped; other in-sync replicas lead what it led"


def delete_led(run: CanaryRun) -> str:
    journal = run.journal
    assert journal is not None
    if run._running():
        raise StepFailed(f"broker {run.broker_id} is running: its data is not deleted")
    if "deleted" not in journal.data:  # journaled before the first one goes
        journal.data["deleted"] = [
            str(directory)
            for partition in (parse(p) for p in journal.data["led"])
            for directory in run._replica_dirs(partition)
            if directory.exists()
        ]
        journal.save()
    for directory in map(Path, journal.data["deleted"]):
        aside = directory.with_name(directory.name + DELETED_SUFFIX)
        if directory.exists():
            if aside.exists():  # a run stopped while removing an earlier copy set aside
                shutil.rmtree(aside)
            directory.rename(aside)  # atomic: the broker finds the whole copy or none
            run._crash_point(f"{DELETE}: {directory.name} set aside")
        if aside.exists():
            shutil.rmtree(aside)
    deleted = journal.data["deleted"]
    return f"deleted {len(deleted)} copies: {', '.join(deleted) or 'none'}"


def restart_on_old(run: CanaryRun) -> str:
    step = run.format_step()
    assert step is not None
    return run._restart_with_format(step.old)


def re_replicate(run: CanaryRun) -> str:
    """Back in every ISR, and each rebuilt copy holds what its leader holds, message by message
    (offset and CRC) up to the shorter of the two."""
    journal = run.journal
    assert journal is not None
    run._ensure_running()
    checks.wait_in_sync(run.cluster, run.timeout)
    leaders = checks.leaders(run.cluster)
    dirs = checks.partition_dirs(run.cluster)
    copied, different = 0, []
    for partition in (parse(p) for p in journal.data["led"]):
        leader = leaders[partition][0]
        mine = dirs.get((*partition, run.broker_id))
        theirs = dirs.get((*partition, leader))
        if mine is None or theirs is None or leader == run.broker_id:
            continue
        reference = {offset: (crc, magic) for offset, crc, magic in checks.headers(theirs)}
        own = [(offset, (crc, magic)) for offset, crc, magic in checks.headers(mine)]
        if any(offset in reference and reference[offset] != held for offset, held in own):
            different.append(name(partition))
        copied += len(own)
    if different:
        raise StepFailed(f"rebuilt copies differ from their leaders: {', '.join(different)}")
    step = run.format_step()
    assert step is not None
    new_left = sum(
        1
        for partition in (parse(p) for p in journal.data["led"])
        if (path := dirs.get((*partition, run.broker_id))) is not None
        for _, magic in checks.entries(path)
        if magic == step.new_magic
    )
    journal.data["re_replicated"] = {"messages": copied, "new_format_entries": new_left}
    journal.save()
    return (
        f"broker {run.broker_id} is back in every ISR; it re-replicated {copied} entries of "
        f"the partitions it led, the same as their leaders hold ({new_left} of them in format "
        f"v{step.new_magic}, written while it was the canary, which every replica keeps: "
        "followers copy their leader's bytes, and older fetchers get them down-converted)"
    )


def give_back_leadership(run: CanaryRun) -> str:
    journal = run.journal
    assert journal is not None
    run._ensure_running()
    before = journal.data.get("assignment_before")
    if before:
        run._reorder({parse(k): v for k, v in before.items()})
    checks.wait_in_sync(run.cluster, run.timeout)
    checks.elect_preferred_leaders(run.cluster, run.timeout)
    mark(run)
    if before is None:
        return "no replica order from before a canary is journaled; leaders preferred"
    return "the replica order from before the canary is back; leaders preferred"


MOVE_LEADERSHIP = "move preferred leadership away from the canary"
DELETE = "delete its copies of the partitions it led"
KINDS: dict[str, list[CanaryStep]] = {
    "canary": [
        CanaryStep(MOVE_LEADERSHIP, move_leadership),
        CanaryStep("elect the preferred leaders", elect_preferred),
        CanaryStep(f"restart it with the new {FORMAT_KEY}", restart_on_new),
        CanaryStep("wait until it is in every ISR, leading what it keeps", settle_and_mark),
        CanaryStep("check the format of new messages on every replica", check_formats),
    ],
    "rollback": [
        CanaryStep("record the partitions it led", record_led),
        CanaryStep("stop it", stop_broker),
        CanaryStep(DELETE, delete_led),
        CanaryStep(f"restart it with the cluster's {FORMAT_KEY}", restart_on_old),
        CanaryStep("let it re-replicate them from their leaders", re_replicate),
        CanaryStep("give back the preferred leadership as it was", give_back_leadership),
        CanaryStep("check the format of new messages on every replica", check_formats),
    ],
}
