"""A Docker Swarm stack file made from ``compose.yaml``: one source of truth for both.

``render_stack`` asks Compose for its rendering of the file (``docker compose config --format
json``, with docker/ensemble.env's settings for three ZooKeepers and docker/remote.env's for the
remote tier on a volume) and changes what Swarm reads differently:

- no ``build`` (the images come from a registry or each node's engine), no ``depends_on`` (Swarm
  has no startup order: a broker waits for ZooKeeper, KAFKA_ZOOKEEPER_CONNECTION_TIMEOUT_MS), no
  project ``name`` (the stack's name is given to ``docker stack deploy``), no unset (null) field;
- N brokers, each a copy of compose's broker-1 with its own id, listener port and log volume,
  pinned by ``node.labels.tidelog.broker-N==true`` to the node that holds that volume, and each
  ZooKeeper by ``node.labels.tidelog.zookeeper-K==true``;
- ports published in host mode on the task's node (Swarm binds every address of the node; the
  routing mesh would send a client to any broker), each broker's EXTERNAL listener advertised
  with its node's address (``external_host``: Swarm's ``{{.Node.Hostname}}`` by default); the
  brokers' admin APIs, which change brokers, are not published: they stay on the overlay network;
- one overlay network, attachable (tidelog's gateway to the admin APIs joins it,
  tidelog.cluster.gateway);
- the remote tier on a volume (``volume``) or a user's S3 bucket (``s3://bucket/prefix``, with
  an endpoint and a credentials file given to every broker as a Swarm secret);
- ``server.properties`` overrides for every broker as a Swarm config.

Other services of the rendering (a profile's, such as ``report`` or ``locust``) are carried as
Compose renders them, with the same generic changes.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
from pathlib import Path

from tidelog.cluster.local import ClusterError

ENSEMBLE_SETTINGS_FILE = "docker/ensemble.env"  # beside compose.yaml
REMOTE_TIER_SETTINGS_FILE = "docker/remote.env"  # beside compose.yaml
TEMPLATE_BROKER = "broker-1"
COMPOSE_BROKERS = ("broker-1", "broker-2", "broker-3")
ZOOKEEPERS = ("zookeeper", "zookeeper-2", "zookeeper-3")
NETWORK = "tidelog"
BROKER_PORT, ZOOKEEPER_PORT = 19091, 12181
REMOTE_TIER_MOUNT = "/var/lib/tidelog/remote"
PROPERTIES_TARGET = "/etc/tidelog/server.properties"  # docker/entrypoint.py reads it first
S3_CREDENTIALS_TARGET = "/run/secrets/tidelog-s3-credentials"
NODE_ADDRESS = "{{.Node.Hostname}}"
# the labels a SwarmCluster finds its services by
BROKER_LABEL = "tidelog.broker-id"
ZOOKEEPER_LABEL = "tidelog.zookeeper-id"


class StackError(ClusterError):
    """A stack that cannot be made as asked: a bad option, or Compose refusing the file."""


def compose_rendering(
    compose_file: str | Path,
    *,
    ensemble: bool = False,
    remote_volume: bool = False,
    profiles: tuple[str, ...] = (),
) -> dict:
    """``docker compose config`` of ``compose_file`` as JSON, with the settings of
    docker/ensemble.env (three ZooKeepers) and docker/remote.env (the remote tier on the shared
    volume) if asked, and these profiles' services too."""
    compose_file = Path(compose_file).resolve()
    root = compose_file.parent
    environment = {
        key: value
        for key, value in os.environ.items()
        if not (key.startswith("TIDELOG_") and key != "TIDELOG_TAG") and key != "COMPOSE_PROFILES"
    }
    if ensemble:
        environment |= _read_environment(root / ENSEMBLE_SETTINGS_FILE)
    if remote_volume:
        environment |= _read_environment(root / REMOTE_TIER_SETTINGS_FILE)
    if profiles:
        wanted = [*environment.get("COMPOSE_PROFILES", "").split(","), *profiles]
        environment["COMPOSE_PROFILES"] = ",".join(p for p in wanted if p)
    command = ["docker", "compose", "-f", str(compose_file), "config", "--format", "json"]
    try:
        done = subprocess.run(
            command, cwd=root, env=environment, capture_output=True, text=True, timeout=60
        )
    except FileNotFoundError:
        raise StackError("docker: not found; scripts/docker-engine.sh installs it") from None
    if done.returncode != 0:
        raise StackError(f"{' '.join(command)} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def swarm_stack(config: dict) -> dict:
    """The generic changes for Swarm, made to compose's rendering of a file: no build, no
    startup ordering, no project name (nor the names it gave volumes and networks), no nulls,
    no extension fields, env files already merged into ``environment`` by the rendering, ports
    published in host mode on the task's node."""
    project = config.get("name")
    stack = _without_nulls(
        {key: value for key, value in config.items() if key != "name" and not key.startswith("x-")}
    )
    assert isinstance(stack, dict)
    # the names Compose gives volumes and networks under its project: the stack's are its own
    for kind in ("volumes", "networks"):
        for key, declared in stack.get(kind, {}).items():
            if isinstance(declared, dict) and declared.get("name") == f"{project}_{key}":
                del declared["name"]
    for service in stack.get("services", {}).values():
        service["networks"] = sorted(service.get("networks", {}))
        for key in ("build", "depends_on", "env_file", "container_name", "profiles"):
            service.pop(key, None)
        service["ports"] = [
            {"target": port["target"], "published": int(port["published"]), "mode": "host"}
            for port in service.get("ports", [])
        ]
    return stack


def render_stack(
    compose_file: str | Path,
    *,
    brokers: int = 3,
    zookeepers: int = 1,
    remote_tier: str | None = None,
    s3_endpoint: str | None = None,
    s3_credentials: str | Path | None = None,
    properties: str | Path | None = None,
    external_host: str = NODE_ADDRESS,
    external_hosts: dict[int, str] | None = None,
    profiles: tuple[str, ...] = (),
    base_port: int = BROKER_PORT,
    zookeeper_port: int = ZOOKEEPER_PORT,
) -> dict:
    """The stack file's document (see the module's docstring). ``external_hosts`` gives some
    brokers another advertised host than ``external_host``."""
    if brokers < 1:
        raise StackError(f"--brokers {brokers}: allowed: 1 or more")
    if zookeepers not in (1, 3):
        raise StackError(f"--zookeeper {zookeepers}: allowed: 1, 3")
    if remote_tier not in (None, "volume") and not (remote_tier or "").startswith("s3://"):
        raise StackError(f"--remote-tier {remote_tier!r}: allowed: volume, s3://BUCKET[/PREFIX]")
    if (s3_endpoint or s3_credentials) and not (remote_tier or "").startswith("s3://"):
        raise StackError("--s3-endpoint and --s3-credentials go with --remote-tier s3://...")
    unknown = sorted(set(external_hosts or {}) - set(range(1, brokers + 1)))
    if unknown:
        raise StackError(f"--external-host for brokers {unknown}: allowed: 1 to {brokers}")
    published = [
        *range(base_port, base_port + brokers),
        *range(zookeeper_port, zookeeper_port + zookeepers),
    ]
    if len(set(published)) < len(published) or not all(0 < p < 65536 for p in published):
        raise StackError(
            f"ports {base_port}+{brokers} (listeners) and {zookeeper_port}+{zookeepers} "
            "(ZooKeeper) overlap or leave 1-65535"
        )
    for path in (s3_credentials, properties):
        if path is not None and not Path(path).is_file():
            raise StackError(f"{path}: no such file")
    config = compose_rendering(
        compose_file,
        ensemble=zookeepers == 3,
        remote_volume=remote_tier == "volume",
        profiles=profiles,
    )
    stack = swarm_stack(config)
    services: dict[str, dict] = stack["services"]
    missing = [s for s in (TEMPLATE_BROKER, *ZOOKEEPERS[:zookeepers]) if s not in services]
    if missing:
        raise StackError(f"{compose_file} renders no service {', '.join(missing)}")
    template = services[TEMPLATE_BROKER]
    for name in COMPOSE_BROKERS:
        services.pop(name, None)
    stack["networks"] = {NETWORK: {"driver": "overlay", "attachable": True}}
    volumes = stack.setdefault("volumes", {})
    for name in COMPOSE_BROKERS:
        volumes.pop(name, None)
    for name in ZOOKEEPERS[zookeepers:]:
        volumes.pop(f"zookeeper-{ZOOKEEPERS.index(name) + 1}", None)
    if remote_tier != "volume":
        volumes.pop("remote-tier", None)
    for number, name in enumerate(ZOOKEEPERS[:zookeepers], start=1):
        zookeeper = services[name]
        zookeeper["ports"] = [
            {"target": 2181, "published": zookeeper_port + number - 1, "mode": "host"}
        ]
        _place(zookeeper, f"zookeeper-{number}", {ZOOKEEPER_LABEL: str(number)})
        if zookeepers > 1:
            # Swarm gives a task's name to the others only once its healthcheck passed, and an
            # ensemble's member passes it only once it reached the others by name: no check
            zookeeper["healthcheck"] = {"disable": True}
    for broker_id in range(1, brokers + 1):
        host = (external_hosts or {}).get(broker_id, external_host)
        service = _broker(template, broker_id, host, base_port)
        services[f"broker-{broker_id}"] = service
        volumes[f"broker-{broker_id}"] = {}
        if remote_tier != "volume":
            service["volumes"] = [v for v in service["volumes"] if v["target"] != REMOTE_TIER_MOUNT]
        if remote_tier and remote_tier.startswith("s3://"):
            environment = service["environment"]
            environment["KAFKA_REMOTE_LOG_STORAGE_SYSTEM_ENABLE"] = "true"
            environment["KAFKA_REMOTE_LOG_STORAGE_URI"] = remote_tier
            if s3_endpoint:
                environment["KAFKA_RSM_CONFIG_ENDPOINT__URL"] = s3_endpoint
            if s3_credentials:
                # botocore (under s3fs) reads the keys from the file this names
                environment["AWS_SHARED_CREDENTIALS_FILE"] = S3_CREDENTIALS_TARGET
                service["secrets"] = [
                    {"source": "s3-credentials", "target": Path(S3_CREDENTIALS_TARGET).name}
                ]
        if properties:
            service["configs"] = [
                {"source": "server-properties", "target": PROPERTIES_TARGET, "mode": 0o444}
            ]
    for service in services.values():
        service["networks"] = [NETWORK]
    if s3_credentials:
        stack["secrets"] = {
            "s3-credentials": {
                "file": str(Path(s3_credentials).resolve()),
                "name": _versioned("tidelog-s3-credentials", Path(s3_credentials)),
            }
        }
    if properties:
        stack["configs"] = {
            "server-properties": {
                "file": str(Path(properties).resolve()),
                "name": _versioned("tidelog-server-properties", Path(properties)),
            }
        }
    return stack


def _broker(template: dict, broker_id: int, host: str, base_port: int) -> dict:
    """Compose's broker-1 made broker ``broker_id``: its id, its listener's port, its log
    volume, its published port (host mode: its EXTERNAL listener alone; the admin API changes
    brokers and stays on the stack's network), its node."""
    service = copy.deepcopy(template)
    port = base_port + broker_id - 1
    name = f"broker-{broker_id}"
    service["hostname"] = name
    environment = service["environment"]
    environment["KAFKA_BROKER_ID"] = str(broker_id)
    environment["KAFKA_LISTENERS"] = f"INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:{port}"
    environment["KAFKA_ADVERTISED_LISTENERS"] = f"INTERNAL://{name}:9092,EXTERNAL://{host}:{port}"
    service["ports"] = [{"target": port, "published": port, "mode": "host"}]
    service["volumes"] = [
        {**volume, "source": name} if volume.get("source") == TEMPLATE_BROKER else volume
        for volume in service.get("volumes", [])
    ]
    # Swarm replaces a task whose healthcheck fails (compose only reports it): a broker slow to
    # answer /health on a loaded node is given 20 s (the image's check, 10 retries) before that
    service["healthcheck"] = {"timeout": "5s", "retries": 10}
    _place(service, name, {BROKER_LABEL: str(broker_id)})
    return service


def _place(service: dict, name: str, labels: dict[str, str]) -> None:
    """One replica, on the node labelled ``tidelog.{name}=true``, restarted when it fails; the
    labels a SwarmCluster finds the service by."""
    deploy = service.setdefault("deploy", {})
    deploy["replicas"] = 1
    # the service's name resolves to its task's address, not to a virtual one: ZooKeeper's
    # peers bind theirs, and a broker's INTERNAL listener is advertised under it
    deploy["endpoint_mode"] = "dnsrr"
    deploy["placement"] = {"constraints": [f"node.labels.tidelog.{name}==true"]}
    deploy["labels"] = {**deploy.get("labels", {}), **labels}
    # one task at a time: the old one stops (its volume free) before the new one starts
    deploy["update_config"] = {"parallelism": 1, "order": "stop-first", "failure_action": "pause"}
    deploy["restart_policy"] = {"condition": "any", "delay": "2s"}


def _versioned(name: str, path: Path) -> str:
    """A config's or secret's name with its content's hash: Swarm's are immutable, so a changed
    file is a new one and ``docker stack deploy`` rolls the services onto it."""
    return f"{name}-{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"


def _without_nulls(value: object) -> object:
    """Compose's rendering spells unset fields as null, which Swarm's schema refuses."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _read_environment(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def write_stack(stack: dict, path: str | Path) -> Path:
    """The stack file, as YAML (JSON is YAML too, but a person reads this one)."""
    import yaml

    path = Path(path)
    path.write_text(
        "# tidelog's stack, made by `tidelog cluster stack` from compose.yaml; deploy with\n"
        "#   docker stack deploy --compose-file "
        + path.name
        + " STACK\n"
        + yaml.safe_dump(stack, sort_keys=False, default_flow_style=False)
    )
    return path
