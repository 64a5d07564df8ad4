"""What tidelog.cluster.swarm decides without an engine: a service's tasks as Swarm prunes them."""

from __future__ import annotations

import json

import pytest

from tidelog.cluster import swarm
from tidelog.cluster.local import ClusterError


@pytest.mark.parametrize(
    "refusal",
    [
        "Error response from daemon: task {id} not found",  # the daemon's words (a CI run's)
        "Error: No such task: {id}",  # the CLI's
    ],
)
def test_a_task_pruned_between_the_listing_and_its_inspection_is_left_out(monkeypatch, refusal):
    listed = ["t-old", "t-pruned", "t-new"]
    created = {"t-old": "2026-11-28T10:00:00Z", "t-new": "2026-11-28T11:00:00Z"}

    def docker(command: list[str], timeout: float) -> str:
        if command[:3] == ["docker", "service", "ps"]:
            return "\n".join(listed)
        asked = command[4:]
        if "t-pruned" in asked:
            raise ClusterError(f"{' '.join(command)} failed: {refusal.format(id='t-pruned')}")
        return json.dumps([{"ID": task, "CreatedAt": created[task]} for task in asked])

    monkeypatch.setattr(swarm, "run_docker", docker)

    assert [task["ID"] for task in swarm._tasks("stack_broker-1")] == ["t-new", "t-old"]


def test_another_inspection_failure_is_not_taken_for_a_pruned_task(monkeypatch):
    def docker(command: list[str], timeout: float) -> str:
        if command[:3] == ["docker", "service", "ps"]:
            return "t-1"
        raise ClusterError("docker inspect failed: permission denied")

    monkeypatch.setattr(swarm, "run_docker", docker)

    with pytest.raises(ClusterError, match="permission denied"):
        swarm._tasks("stack_broker-1")
