"""compose.yaml as Compose and Swarm read it: valid, brokers reachable from the host on
127.0.0.1 only, named listeners, log dirs on volumes, the ensemble profile; the stack file
`tidelog cluster stack` makes of it, as `docker stack config` reads it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tidelog.cluster.stack import swarm_stack

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.containers


@pytest.fixture(scope="module", autouse=True)
def docker_compose(docker_engine) -> None:
    """Compose v2, which scripts/docker-engine.sh installs with the engine: asked for at
    collection, as it was, a fresh machine had none yet and skipped every test here."""
    done = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    assert done.returncode == 0, f"no 'docker compose' after scripts/docker-engine.sh: {done}"


def compose_config(*options: str) -> dict:
    done = subprocess.run(
        ["docker", "compose", "-f", "compose.yaml", *options, "config", "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_three_brokers_with_named_listeners_published_on_loopback() -> None:
    config = compose_config()
    assert sorted(config["services"]) == ["broker-1", "broker-2", "broker-3", "zookeeper"]
    for broker_id in (1, 2, 3):
        service = config["services"][f"broker-{broker_id}"]
        environment = service["environment"]
        assert environment["KAFKA_BROKER_ID"] == str(broker_id)
        assert environment["KAFKA_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"
        # started with ZooKeeper by `docker compose restart`, a broker waits for it
        assert environment["KAFKA_ZOOKEEPER_CONNECTION_TIMEOUT_MS"] == "60000"
        assert environment["KAFKA_ADVERTISED_LISTENERS"] == (
            f"INTERNAL://broker-{broker_id}:9092,EXTERNAL://127.0.0.1:{19090 + broker_id}"
        )
        assert {port["host_ip"] for port in service["ports"]} == {"127.0.0.1"}
        volumes = {v["target"]: v["source"] for v in service["volumes"]}
        # its own log dir; the remote tier's volume, shared (used with docker/remote.env)
        assert volumes == {
            "/var/lib/tidelog/logs": f"broker-{broker_id}",
            "/var/lib/tidelog/remote": "remote-tier",
        }
        assert service["image"] == "tidelog:dev"
        assert "KAFKA_REMOTE_LOG_STORAGE_SYSTEM_ENABLE" not in environment
        assert service["depends_on"]["zookeeper"]["condition"] == "service_healthy"
    assert {p["host_ip"] for p in config["services"]["zookeeper"]["ports"]} == {"127.0.0.1"}


def test_the_ensemble_profile_runs_three_zookeepers_under_the_brokers() -> None:
    config = compose_config("--env-file", "docker/ensemble.env")
    zookeepers = [name for name in config["services"] if name.startswith("zookeeper")]
    assert sorted(zookeepers) == ["zookeeper", "zookeeper-2", "zookeeper-3"]
    for name in zookeepers:
        assert config["services"][name]["environment"]["ZOO_SERVERS"].count("server.") == 3
    connect = config["services"]["broker-1"]["environment"]["KAFKA_ZOOKEEPER_CONNECT"]
    assert connect == "zookeeper:2181,zookeeper-2:2181,zookeeper-3:2181"


def test_the_remote_tier_settings_reach_every_broker_after_the_shared_ones() -> None:
    config = compose_config("--env-file", "docker/remote.env")
    for broker_id in (1, 2, 3):
        environment = config["services"][f"broker-{broker_id}"]["environment"]
        assert environment["KAFKA_REMOTE_LOG_STORAGE_SYSTEM_ENABLE"] == "true"
        assert environment["KAFKA_REMOTE_LOG_STORAGE_URI"] == "file:///var/lib/tidelog/remote"


def test_the_report_profile_reads_the_run_data_volume() -> None:
    assert "report" not in compose_config()["services"]
    report = compose_config("--profile", "report")["services"]["report"]
    assert report["image"] == "tidelog-tools:dev"
    assert [(v["source"], v["target"]) for v in report["volumes"]] == [
        ("run-data", "/var/lib/tidelog/runs")
    ]


def test_the_report_profile_computes_on_a_spark_master_and_two_workers() -> None:
    """The master and workers run PySpark's spark-class (through the entry point) on the tools
    image, with the run data at the report's path: the executors read it there."""
    assert not {"spark-master", "spark-worker"} & set(compose_config()["services"])
    services = compose_config("--profile", "report")["services"]
    report, master, worker = (services[s] for s in ("report", "spark-master", "spark-worker"))
    assert report["command"] == ["--master", "spark://spark-master:7077"]
    assert report["depends_on"]["spark-master"]["condition"] == "service_healthy"
    assert report["depends_on"]["spark-worker"]["condition"] == "service_started"
    assert master["entrypoint"] == ["python", "/opt/tidelog/entrypoint.py", "spark-master"]
    assert "7077" in " ".join(master["healthcheck"]["test"])
    assert worker["entrypoint"] == ["python", "/opt/tidelog/entrypoint.py", "spark-worker"]
    assert worker["command"] == ["spark://spark-master:7077"]
    assert worker["deploy"]["replicas"] == 2
    assert worker["environment"] == {"SPARK_WORKER_CORES": "1", "SPARK_WORKER_MEMORY": "2g"}
    assert worker["depends_on"]["spark-master"]["condition"] == "service_healthy"
    for service in (report, master, worker):
        assert service["image"] == "tidelog-tools:dev"
        assert service["profiles"] == ["report"]
        assert [(v["source"], v["target"]) for v in service["volumes"]] == [
            ("run-data", "/var/lib/tidelog/runs")
        ]
        assert not service.get("ports")  # nothing published: the driver and master talk inside


def test_the_report_profiles_cluster_takes_its_sizes_and_a_host_directory(tmp_path) -> None:
    settings = tmp_path / "spark.env"
    settings.write_text(
        f"TIDELOG_RUN_DATA={tmp_path}\nTIDELOG_SPARK_WORKERS=3\n"
        "TIDELOG_SPARK_WORKER_CORES=2\nTIDELOG_SPARK_WORKER_MEMORY=4g\n"
    )
    services = compose_config("--profile", "report", "--env-file", str(settings))["services"]
    worker = services["spark-worker"]
    assert worker["deploy"]["replicas"] == 3
    assert worker["environment"] == {"SPARK_WORKER_CORES": "2", "SPARK_WORKER_MEMORY": "4g"}
    for name in ("report", "spark-master", "spark-worker"):
        (volume,) = services[name]["volumes"]
        assert (volume["type"], volume["source"], volume["target"]) == (
            "bind",
            str(tmp_path),
            "/var/lib/tidelog/runs",
        )


def test_the_locust_profile_runs_a_master_and_workers_on_the_internal_listeners() -> None:
    services = compose_config("--profile", "locust")["services"]
    master, worker = services["locust-master"], services["locust-worker"]
    assert master["command"] == [
        *("--master", "--expect-workers", "2"),
        *("--bootstrap", "broker-1:9092,broker-2:9092,broker-3:9092"),
    ]
    assert worker["command"] == ["--worker", "--master-host", "locust-master"]
    assert worker["deploy"]["replicas"] == 2
    for service in (master, worker):
        assert service["image"] == "tidelog-tools:dev"
        assert service["entrypoint"][-1] == "locust"
    assert {p["host_ip"] for p in master["ports"]} == {"127.0.0.1"}


def test_swarm_takes_the_file_with_the_readmes_changes(tmp_path: Path) -> None:
    """``docker stack config`` renders a stack as ``docker stack deploy`` would read it."""
    stack = tmp_path / "stack.json"
    stack.write_text(json.dumps(swarm_stack(compose_config())))
    done = subprocess.run(
        ["docker", "stack", "config", "--compose-file", str(stack)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert all(f"broker-{broker_id}:" in done.stdout for broker_id in (1, 2, 3))
    # and the file as it is needs them: Swarm's schema has no build-time ordering conditions
    unchanged = subprocess.run(
        ["docker", "stack", "config", "--compose-file", str(ROOT / "compose.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unchanged.returncode != 0


def stack_config(path: Path) -> dict:
    """The stack file as ``docker stack deploy`` would read it."""
    done = subprocess.run(
        ["docker", "stack", "config", "--compose-file", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def cluster_stack(tmp_path: Path, *options: str) -> dict:
    path = tmp_path / "stack.yaml"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "tidelog.cli", "cluster", "stack"),
            *("--compose-file", str(ROOT / "compose.yaml"), "-o", str(path), *options),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "docker node update --label-add" in done.stdout
    return stack_config(path)


def test_the_stack_command_pins_five_brokers_and_an_ensemble_to_their_nodes(
    tmp_path: Path,
) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text("log.retention.hours=24\n")
    credentials = tmp_path / "credentials"
    credentials.write_text("[default]\naws_access_key_id=a\naws_secret_access_key=b\n")
    stack = cluster_stack(
        tmp_path,
        *("--brokers", "5", "--zookeeper", "3", "--remote-tier", "s3://tidelog/tier"),
        *("--s3-endpoint", "http://minio:9000", "--s3-credentials", str(credentials)),
        *("--properties", str(properties), "--external-host", "4=broker4.example"),
    )
    services = stack["services"]
    assert sorted(services) == [
        *(f"broker-{n}" for n in range(1, 6)),
        *("zookeeper", "zookeeper-2", "zookeeper-3"),
    ]
    for broker_id in range(1, 6):
        service = services[f"broker-{broker_id}"]
        environment = service["environment"]
        port = 19090 + broker_id
        host = "broker4.example" if broker_id == 4 else "{{.Node.Hostname}}"
        assert environment["KAFKA_BROKER_ID"] == str(broker_id)
        assert environment["KAFKA_ADVERTISED_LISTENERS"] == (
            f"INTERNAL://broker-{broker_id}:9092,EXTERNAL://{host}:{port}"
        )
        assert environment["KAFKA_ZOOKEEPER_CONNECT"] == (
            "zookeeper:2181,zookeeper-2:2181,zookeeper-3:2181"
        )
        assert environment["KAFKA_REMOTE_LOG_STORAGE_URI"] == "s3://tidelog/tier"
        assert environment["KAFKA_RSM_CONFIG_ENDPOINT__URL"] == "http://minio:9000"
        assert service["deploy"]["placement"]["constraints"] == [
            f"node.labels.tidelog.broker-{broker_id}==true"
        ]
        published = {(p["target"], p["published"], p["mode"]) for p in service["ports"]}
        assert published == {(port, port, "host")}  # the admin API stays on the overlay
        # its own log volume, no remote-tier volume (the tier is the bucket)
        assert [(v["source"], v["target"]) for v in service["volumes"]] == [
            (f"broker-{broker_id}", "/var/lib/tidelog/logs")
        ]
        assert [c["target"] for c in service["configs"]] == ["/etc/tidelog/server.properties"]
        assert [s["source"] for s in service["secrets"]] == ["s3-credentials"]
        assert service["networks"] == {"tidelog": None}
        # Swarm replaces an unhealthy task: the image's check, with room for a loaded node
        assert service["healthcheck"] == {"timeout": "5s", "retries": 10}
    for number, name in enumerate(("zookeeper", "zookeeper-2", "zookeeper-3"), start=1):
        assert services[name]["deploy"]["placement"]["constraints"] == [
            f"node.labels.tidelog.zookeeper-{number}==true"
        ]
        # an ensemble's members resolve each other's names before any is healthy
        assert services[name]["healthcheck"] == {"disable": True}
    assert stack["networks"]["tidelog"] == {"driver": "overlay", "attachable": True}
    assert "remote-tier" not in stack["volumes"]


def test_the_stack_command_carries_a_profiles_services_and_refuses_bad_options(
    tmp_path: Path,
) -> None:
    stack = cluster_stack(tmp_path, "--remote-tier", "volume", "--profile", "locust")
    services = stack["services"]
    assert {"locust-master", "locust-worker"} <= set(services)
    assert services["locust-worker"]["deploy"]["replicas"] == 2
    for broker_id in (1, 2, 3):
        environment = services[f"broker-{broker_id}"]["environment"]
        assert environment["KAFKA_REMOTE_LOG_STORAGE_URI"] == "file:///var/lib/tidelog/remote"
        volumes = {v["target"]: v["source"] for v in services[f"broker-{broker_id}"]["volumes"]}
        assert volumes["/var/lib/tidelog/remote"] == "remote-tier"
    for options, message in [
        (["--zookeeper", "2"], "invalid choice"),
        (["--brokers", "0"], "--brokers 0: allowed: 1 or more"),
        (["--remote-tier", "gs://x"], "--remote-tier 'gs://x': allowed: volume, s3://"),
        (["--s3-endpoint", "http://x"], "--s3-endpoint and --s3-credentials go with"),
        (["--external-host", "7=h"], "--external-host for brokers [7]: allowed: 1 to 3"),
        (["--zookeeper-port", "19092"], "overlap or leave 1-65535"),
    ]:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "tidelog.cli", "cluster", "stack"),
                *("--compose-file", str(ROOT / "compose.yaml")),
                *("-o", str(tmp_path / "refused.yaml"), *options),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and message in done.stderr, (options, done.stderr)
    assert not (tmp_path / "refused.yaml").exists()
