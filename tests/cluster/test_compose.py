"""What tidelog.cluster.compose decides without an engine: setting names and the env files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.cluster.compose import ComposeCluster, kafka_variable, setting_of
from tidelog.cluster.local import ClusterError, LocalCluster
from tidelog.cluster.rolling import open_cluster
from tidelog.config import BROKER_KEYS


@pytest.mark.parametrize(
    ("key", "variable"),
    [
        ("broker.id", "KAFKA_BROKER_ID"),
        ("log.segment.bytes", "KAFKA_LOG_SEGMENT_BYTES"),
        ("advertised.listeners", "KAFKA_ADVERTISED_LISTENERS"),
        ("some_key.with-dash", "KAFKA_SOME__KEY_WITH___DASH"),
    ],
)
def test_settings_are_spelled_as_confluents_images_spell_them(key: str, variable: str) -> None:
    assert kafka_variable(key) == variable
    assert setting_of(variable) == key


def test_every_broker_key_survives_the_round_trip() -> None:
    for key in BROKER_KEYS:
        assert setting_of(kafka_variable(key)) == key


def test_a_cluster_writes_its_ports_and_broker_settings(tmp_path: Path) -> None:
    ports = {"TIDELOG_ZOOKEEPER_PORT": 12000}
    ports |= {f"TIDELOG_BROKER_{b}_PORT": 12000 + b for b in (1, 2, 3)}
    ports |= {f"TIDELOG_BROKER_{b}_ADMIN_PORT": 12010 + b for b in (1, 2, 3)}
    cluster = ComposeCluster.create(
        tmp_path, "compose.yaml", "p1", ports, settings={"log.segment.bytes": "65536"}
    )
    again = ComposeCluster(tmp_path, "compose.yaml")  # made again from its directory
    assert again.project == "p1"
    assert again.bootstrap_servers == "127.0.0.1:12001,127.0.0.1:12002,127.0.0.1:12003"
    assert again.zookeeper == "127.0.0.1:12000"
    assert again.broker(2).admin_port == 12012
    assert (tmp_path / "broker.env").read_text() == "KAFKA_LOG_SEGMENT_BYTES=65536\n"
    with pytest.raises(ClusterError, match="compose.yaml runs 3 brokers, not 5"):
        cluster.up(5)
    with pytest.raises(ClusterError, match="no broker 4"):
        cluster.broker(4)


def test_no_cluster_without_its_env_file(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="no compose cluster"):
        ComposeCluster(tmp_path, "compose.yaml")


def test_an_ensemble_cluster_takes_the_ensemble_profiles_settings(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    cluster = ComposeCluster.create(tmp_path, root / "compose.yaml", "p2", ensemble=True)
    assert cluster.environment["COMPOSE_PROFILES"] == "ensemble"
    assert cluster.environment["TIDELOG_ZOOKEEPER_CONNECT"].count(":2181") == 3
    assert cluster.environment["TIDELOG_ZOO_SERVERS"].count("server.") == 3


def test_a_brokers_own_settings_and_image_tag_are_remembered(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    cluster = ComposeCluster.create(tmp_path, root / "compose.yaml", "p3", remote_tier=True)
    cluster.set_broker_overrides(2, {"log.message.format.version": "0.10.0"})
    cluster.set_image_tag(2, "next")
    again = ComposeCluster(tmp_path)  # the compose file it was created with
    assert again.compose_file == (root / "compose.yaml").resolve()
    assert again.broker_overrides(2) == {"log.message.format.version": "0.10.0"}
    assert again.broker_overrides(1) == {}
    assert (again.image(1), again.image(2)) == ("tidelog:dev", "tidelog:next")
    assert again.environment["TIDELOG_REMOTE_TIER_SETTINGS"].endswith("docker/remote.env")
    assert "KAFKA_LOG_MESSAGE_FORMAT_VERSION=0.10.0" in (tmp_path / "broker-2.env").read_text()


def test_open_cluster_tells_a_compose_project_from_local_processes(tmp_path: Path) -> None:
    ComposeCluster.create(tmp_path / "compose", "compose.yaml", "p4")
    assert isinstance(open_cluster(tmp_path / "compose"), ComposeCluster)
    assert isinstance(open_cluster(tmp_path / "local"), LocalCluster)


def test_a_broker_container_that_exits_while_awaited_is_an_error_at_once(
    tmp_path: Path, monkeypatch
) -> None:
    """compose.yaml restarts no container: one that exited while starting (a setting the
    broker refuses, a crash) is reported on the first look, not after the wait's timeout."""
    cluster = ComposeCluster.create(tmp_path, "compose.yaml", "p4")
    seen = iter([{"broker-2": "starting"}, {"broker-2": "exited"}])
    monkeypatch.setattr(ComposeCluster, "healths", lambda self: next(seen))

    with pytest.raises(ClusterError, match="broker container broker-2 .* ended") as failed:
        cluster.wait_healthy([2], timeout=600)

    assert "broker-2 exited" in str(failed.value)
