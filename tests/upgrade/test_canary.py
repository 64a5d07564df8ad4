"""When `upgrade canary` and `rollback` refuse to start: decided from the cluster directory (its
brokers' server.properties and the journals) before anything is asked of a running cluster."""

from __future__ import annotations

import json

import pytest

from tidelog.upgrade.canary import CANARY_JOURNAL, CanaryRefused, CanaryRun
from tidelog.upgrade.run import JOURNAL

PHASE_ONE_DONE = {
    "broker.protocol.max.version": "0.10.0",
    "inter.broker.protocol.version": "0.10.0-IV0",
    "log.message.format.version": "0.9.0",
}


def cluster_dir(tmp_path, settings: dict[int, dict[str, str]]):
    """A cluster directory as `cluster up` writes it, with no process running."""
    from tidelog.cluster.local import LocalCluster

    brokers = {}
    for broker_id, overrides in settings.items():
        directory = tmp_path / f"broker-{broker_id}"
        directory.mkdir()
        properties = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{9000 + broker_id}",
            "log.dirs": str(directory / "logs"),
            "zookeeper.connect": "127.0.0.1:1",
            **overrides,
        }
        config = directory / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        brokers[str(broker_id)] = {
            "broker_id": broker_id,
            "port": 9000 + broker_id,
            "admin_port": 9100 + broker_id,
            "config": str(config),
            "process": None,
        }
    document = {"zookeeper": "127.0.0.1:1", "zookeeper_process": None, "brokers": brokers}
    (tmp_path / "cluster.json").write_text(json.dumps(document))
    return LocalCluster(tmp_path)


def refusal(cluster, kind: str, broker_id: int) -> str | None:
    runner = CanaryRun(cluster, kind, broker_id, progress=lambda _: None)
    reason = runner.refusal()
    if reason is not None:
        with pytest.raises(CanaryRefused, match="."):
            runner.run()
        assert not (cluster.directory / CANARY_JOURNAL).exists()  # nothing was started
    return reason


def test_a_canary_needs_phase_1_done_on_every_broker(tmp_path):
    settings = {b: dict(PHASE_ONE_DONE) for b in (1, 2, 3)}
    settings[3]["inter.broker.protocol.version"] = "0.9.0"
    reason = refusal(cluster_dir(tmp_path, settings), "canary", 2)
    assert reason is not None and reason.startswith("phase 1 is not done: broker 3 runs")
    assert "inter.broker.protocol.version=0.9.0" in reason


def test_an_unknown_broker_is_refused(tmp_path):
    cluster = cluster_dir(tmp_path, {b: dict(PHASE_ONE_DONE) for b in (1, 2, 3)})
    assert refusal(cluster, "canary", 7) == f"no broker 7 in the cluster at {tmp_path}"
    assert refusal(cluster, "rollback", 7) == f"no broker 7 in the cluster at {tmp_path}"


def test_one_canary_at_a_time_and_only_a_canary_rolls_back(tmp_path):
    settings = {b: dict(PHASE_ONE_DONE) for b in (1, 2, 3)}
    settings[2]["log.message.format.version"] = "0.10.0"
    cluster = cluster_dir(tmp_path, settings)
    assert "broker 2 is already on log.message.format.version=0.10.0" in refusal(
        cluster, "canary", 2
    )
    assert "broker 2 runs log.message.format.version=0.10.0: one canary at a time" in refusal(
        cluster, "canary", 3
    )
    assert refusal(cluster, "rollback", 3) == (
        "broker 3 is not a canary: it runs log.message.format.version=0.9.0"
    )


def test_a_rollback_is_not_for_phase_2(tmp_path):
    settings = {b: {**PHASE_ONE_DONE, "log.message.format.version": "0.10.0"} for b in (1, 2, 3)}
    reason = refusal(cluster_dir(tmp_path, settings), "rollback", 2)
    assert reason is not None and "a rollback takes back one canary" in reason


def test_unfinished_journals_come_first(tmp_path):
    cluster = cluster_dir(tmp_path, {b: dict(PHASE_ONE_DONE) for b in (1, 2, 3)})
    run_journal = {"target": "0.10.0", "state": "failed", "steps": [], "phases": {}, "log": []}
    (tmp_path / JOURNAL).write_text(json.dumps(run_journal))
    assert "an upgrade run to 0.10.0 is unfinished" in refusal(cluster, "canary", 2)
    (tmp_path / JOURNAL).unlink()
    canary = {"kind": "canary", "broker": 1, "state": "failed", "steps": {}, "data": {}, "log": []}
    (tmp_path / CANARY_JOURNAL).write_text(json.dumps(canary))
    runner = CanaryRun(cluster, "canary", 2, progress=lambda _: None)
    assert "an unfinished canary of broker 1" in runner.refusal()
    assert "`tidelog upgrade canary 1 --dir" in runner.refusal()


PHASE_ONE_OF_2_1_DONE = {
    "broker.protocol.max.version": "2.1",
    "inter.broker.protocol.version": "2.1",
    "log.message.format.version": "0.10.0",
}


def test_the_v1_to_v2_canary_needs_phase_1_of_the_upgrade_to_2_1(tmp_path):
    settings = {b: dict(PHASE_ONE_OF_2_1_DONE) for b in (1, 2, 3)}
    settings[3]["inter.broker.protocol.version"] = "0.10.0"
    reason = refusal(cluster_dir(tmp_path, settings), "canary", 2)
    assert reason is not None and reason.startswith("phase 1 is not done: broker 3 runs")
    assert "on log.message.format.version=2.1 needs every broker on 2.1 code" in reason
    assert "`tidelog upgrade plan --to 2.1`" in reason


def test_a_v2_canary_is_rolled_back_to_v1_and_a_cluster_on_v2_has_no_canary(tmp_path):
    settings = {b: dict(PHASE_ONE_OF_2_1_DONE) for b in (1, 2, 3)}
    settings[2]["log.message.format.version"] = "2.1"
    runner = CanaryRun(cluster_dir(tmp_path, settings), "rollback", 2, progress=print)
    step = runner.format_step()
    assert step is not None and (step.old, step.new) == ("0.10.0", "2.1")
    assert runner._settings_refusal() is None
    assert "broker 2 runs log.message.format.version=2.1: one canary at a time" in refusal(
        runner.cluster, "canary", 3
    )


def test_a_cluster_on_v2_has_no_next_format_to_try(tmp_path):
    settings = {b: {**PHASE_ONE_OF_2_1_DONE, "log.message.format.version": "2.1"} for b in (1, 2)}
    reason = refusal(cluster_dir(tmp_path, settings), "canary", 2)
    assert reason == (
        "the cluster runs log.message.format.version=2.1: a canary starts from a cluster at one "
        "of 0.9.0, 0.10.0"
    )
