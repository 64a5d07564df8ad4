"""Issue 25's figures: each fault of `scenario replication` on one three-broker cluster in
network namespaces, acks=all, replication factor 3, min.insync.replicas 2, RUNS times.

    .venv/bin/python benchmarks/faults.py [--runs 5] [--faults partition,degraded,...] [--compose]

--compose: on compose.yaml's cluster instead (its own project on free ports, removed after;
the images as scripts/docker-engine.sh --images builds them, TIDELOG_TAG naming their tag).

Per fault: the longest stretch without an acknowledgement and the time until the producer was
served again after the fault (p50 and max over the runs), acknowledged messages lost (total),
and the time from the fault's end to a full ISR (p50, max); with the load average before and
after, as the figures are wall-clock times on a shared machine. Needs root. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from pathlib import Path

from tidelog.cluster.compose import ComposeCluster
from tidelog.cluster.faults import DiskErrorSettings
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.scenario import SCENARIO_OVERRIDES, ScenarioSettings, run_scenario

CASES: dict[str, dict] = {
    "partition": {"failure": "partition"},
    "partition_zookeeper": {"failure": "partition_zookeeper"},
    "partition_one_way": {"failure": "partition_one_way"},
    "partition_halves": {"failure": "partition_halves"},
    "degraded (1mbit, 5% loss)": {"failure": "degraded"},
    "power_loss leader": {"failure": "power_loss"},
    "power_loss replicas": {"failure": "power_loss", "target": "replicas"},
    "disk_full leader": {"failure": "disk_full", "rate": 300},
    "disk_errors leader (write, p=0.05)": {
        "failure": "disk_errors",
        "disk_errors": DiskErrorSettings(("write",), 0.05),
    },
    "power_loss replicas, flush.messages=1": {
        "failure": "power_loss",
        "target": "replicas",
        "topic_config": {"flush.messages": "1"},
    },
}


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):6.2f} / {max(values):6.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--faults", help="comma-separated case names (default: all)")
    parser.add_argument("--compose", action="store_true", help="on compose.yaml's cluster")
    args = parser.parse_args()
    wanted = [c for c in CASES if not args.faults or c.split()[0] in args.faults.split(",")]
    directory = tempfile.mkdtemp(prefix="tidelog-bench-faults-")
    cluster: LocalCluster | ComposeCluster
    if args.compose:
        compose_file = Path(__file__).resolve().parents[1] / "compose.yaml"
        cluster = ComposeCluster.create(directory, compose_file, f"tidelog-bench-{os.getpid()}")
        cluster.up(overrides=dict(SCENARIO_OVERRIDES), progress=lambda _: None, build=False)
    else:
        cluster = LocalCluster(directory)
        cluster.up(3, overrides=dict(SCENARIO_OVERRIDES), progress=lambda _: None, netns=True)
    print(f"load average before: {os.getloadavg()}")
    print(
        f"{'fault':40} {'without ack p50/max s':>22} {'served again p50/max s':>23} "
        f"{'lost':>5} {'full ISR after p50/max s':>25}"
    )
    try:
        for case in wanted:
            gaps, served, isr, lost = [], [], [], 0
            for _ in range(args.runs):
                settings = ScenarioSettings(**{"rate": 100, "settle_seconds": 1.0, **CASES[case]})
                _, report = asyncio.run(run_scenario(cluster, settings, progress=lambda _: None))
                found = report.availability
                assert found is not None
                gaps.append(found.overall.longest_gap_s)
                served += [s for s in found.overall.served_again_after_fault_s if s is not None]
                isr += list(found.full_isr_after_s)
                lost += len(report.lost)
            print(
                f"{case:40} {spread(gaps):>22} {spread(served):>23} {lost:>5} {spread(isr):>25}",
                flush=True,
            )
    finally:
        cluster.down(progress=lambda _: None)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
