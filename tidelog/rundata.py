"""Run directories: the raw data every load run, perf run, scenario and upgrade leaves behind.

This module is the one place that spells the layout; writers (``tidelog perf produce --out``,
``tidelog scenario replication --out``, and later the locust load runs and the tiered-storage
cases) call it, and ``tidelog report`` (tidelog/pipeline) reads what it wrote. It uses pyarrow,
never Spark, so writers stay light.

    RUN_DIR/
      metadata.json     RunMetadata: kind, case, workload, tiered, run start and end (UTC ISO),
                        settings (what the run was asked to do), profile (the cluster's shape and
                        broker settings), machine (cores, memory, OS, Python), verdict (scenarios)
      acks.parquet      one row per acknowledged produced record (ACKS)
      consumer.parquet  consumer progress samples (CONSUMER)
      events.parquet    what was injected or happened to the cluster (EVENTS)
      consumed.parquet  what a delivery check consumed back (CONSUMED; scenarios)

A table a run has no rows for may be absent. Times are UTC timestamps in microseconds. Field
meanings:

- acks: ``acked_at`` when the acknowledgement arrived; ``latency_ms`` from the time the record
  was due to be sent (perf: its slot at the --throughput rate; scenarios: the request) to then;
  ``partition``, ``offset`` (-1 if the producer did not learn it), ``bytes`` (the value's size),
  ``message`` (a delivery oracle's id such as ``2-00000017``, else null).
- consumer: ``sampled_at``, ``consumer`` (a name: "in-sync-1", "catching-up-3"), ``partition``,
  ``offset`` (the next offset it will read), ``lag`` (high watermark minus offset, records).
- events: ``at``, ``kind``, ``target`` (a broker id or a partition, as text), ``duration_ms``
  (how long it lasted, null if a moment), ``detail`` (what the tool said). Kinds: a scenario's
  fault (hard_bounce, ...); from ``perf tiered-storage``: ``kill_and_wipe`` (a broker killed,
  out of every ISR and its data deleted), ``broker_start`` (it is started again), ``rebuild``
  (written once it is back in every ISR; ``duration_ms`` from its start until then) and
  ``catch_up_consumers`` (the out-of-sync readers start).
- consumed: ``partition``, ``offset``, ``message`` (same ids as acks.message).

``case`` names the reference test case the run stands for (``normal``, ``consumers``,
``rebuild``, or a scenario's failure name); ``workload`` is ``acks=all``, ``acks=1`` or
``acks=0``; ``tiered`` says whether the topic kept a remote tier.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

TIME = pa.timestamp("us", tz="UTC")
ACKS = pa.schema(
    [
        ("acked_at", TIME),
        ("latency_ms", pa.float64()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("bytes", pa.int32()),
        ("message", pa.string()),
    ]
)
CONSUMER = pa.schema(
    [
        ("sampled_at", TIME),
        ("consumer", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("lag", pa.int64()),
    ]
)
EVENTS = pa.schema(
    [
        ("at", TIME),
        ("kind", pa.string()),
        ("target", pa.string()),
        ("duration_ms", pa.float64()),
        ("detail", pa.string()),
    ]
)
CONSUMED = pa.schema([("partition", pa.int32()), ("offset", pa.int64()), ("message", pa.string())])
TABLES: dict[str, pa.Schema] = {
    "acks": ACKS,
    "consumer": CONSUMER,
    "events": EVENTS,
    "consumed": CONSUMED,
}
METADATA = "metadata.json"
WORKLOADS = {-1: "acks=all", 0: "acks=0", 1: "acks=1"}


def machine() -> dict[str, Any]:
    """What the run ran on."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = -1
    return {
        "hostname": platform.node(),
        "cores": os.cpu_count(),
        "memory_bytes": memory,
        "os": platform.platform(),
        "python": sys.version.split()[0],
    }


def now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class RunMetadata:
    """metadata.json. ``started_at``/``ended_at`` are UTC ISO 8601 times."""

    kind: str  # "perf-produce", "scenario-replication", "locust", ...
    case: str
    workload: str
    tiered: bool = False
    started_at: str = field(default_factory=now)
    ended_at: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=machine)
    verdict: dict[str, Any] | None = None


def write_metadata(run_dir: str | Path, metadata: RunMetadata) -> Path:
    path = Path(run_dir) / METADATA
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(metadata), indent=2, default=str) + "\n")
    return path


def read_metadata(run_dir: str | Path) -> RunMetadata:
    path = Path(run_dir) / METADATA
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: not a run directory (no {METADATA})")
    return RunMetadata(**json.loads(path.read_text()))


def table_path(run_dir: str | Path, name: str) -> Path:
    if name not in TABLES:
        raise ValueError(f"no run table {name!r}: the tables are {', '.join(TABLES)}")
    return Path(run_dir) / f"{name}.parquet"


def write_table(run_dir: str | Path, name: str, columns: Mapping[str, Sequence | pa.Array]) -> Path:
    """Writes table ``name`` from columns named as its schema says (every one, no other);
    pyarrow checks the types. Times may be datetimes or epoch microseconds."""
    path = table_path(run_dir, name)
    schema = TABLES[name]
    if set(columns) != set(schema.names):
        raise ValueError(
            f"table {name} has columns {', '.join(schema.names)}; got {', '.join(columns)}"
        )
    arrays = [pa.array(columns[column], type=schema.field(column).type) for column in schema.names]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), path)
    return path


def read_table(run_dir: str | Path, name: str) -> pa.Table | None:
    """The table, or None if the run has none."""
    path = table_path(run_dir, name)
    return pq.read_table(path, schema=TABLES[name]) if path.exists() else None


def epoch_microseconds(seconds: float) -> int:
    return round(seconds * 1_000_000)


@dataclass(frozen=True)
class Event:
    """One row of the events table; ``at`` in seconds since the epoch."""

    at: float
    kind: str
    target: str
    duration_ms: float | None = None
    detail: str = ""


def write_events(run_dir: str | Path, events: Sequence[Event]) -> Path:
    return write_table(
        run_dir,
        "events",
        {
            "at": [epoch_microseconds(e.at) for e in events],
            "kind": [e.kind for e in events],
            "target": [e.target for e in events],
            "duration_ms": [e.duration_ms for e in events],
            "detail": [e.detail for e in events],
        },
    )
