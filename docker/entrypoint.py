"""The entry point of tidelog's images: a broker, a standalone node, or the healthcheck.

    entrypoint.py broker [tidelog broker options]      the broker image
    entrypoint.py standalone [tidelog broker options]  ZooKeeper and one broker (standalone image)
    entrypoint.py health                               exit 0 when the broker's /health says so

A broker's settings are Kafka's names, from /etc/tidelog/server.properties when one is mounted,
then from KAFKA_* environment variables as Confluent's images spell them (KAFKA_BROKER_ID is
broker.id: '_' is '.', '__' is '_', '___' is '-'), then the image's defaults for what is still
unset (DEFAULTS). The resulting file is written to /var/lib/tidelog/server.properties, where the
healthcheck reads admin.listener.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

MOUNTED_CONFIG = Path("/etc/tidelog/server.properties")
EFFECTIVE_CONFIG = Path("/var/lib/tidelog/server.properties")
DEFAULTS = {
    "listeners": "PLAINTEXT://0.0.0.0:9092",
    "admin.listener": "0.0.0.0:8080",
    "log.dirs": "/var/lib/tidelog/logs",
}
STANDALONE_ZOOKEEPER = Path("/var/lib/tidelog/zookeeper")


def broker_properties(environment: dict[str, str]) -> dict[str, str]:
    from tidelog.cluster.compose import setting_of
    from tidelog.config import read_properties

    properties = read_properties(MOUNTED_CONFIG) if MOUNTED_CONFIG.exists() else {}
    for variable, value in sorted(environment.items()):
        if variable.startswith("KAFKA_"):
            properties[setting_of(variable)] = value
    for key, value in DEFAULTS.items():
        properties.setdefault(key, value)
    return properties


def write_config(properties: dict[str, str]) -> Path:
    EFFECTIVE_CONFIG.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    return EFFECTIVE_CONFIG


def broker_command(arguments: list[str]) -> list[str]:
    return ["tidelog", "broker", "--config", str(EFFECTIVE_CONFIG), *arguments]


def broker(arguments: list[str]) -> None:
    write_config(broker_properties(dict(os.environ)))
    command = broker_command(arguments)
    os.execvp(command[0], command)  # the broker is PID 1: it gets docker stop's SIGTERM


def standalone(arguments: list[str]) -> int:
    """ZooKeeper on 127.0.0.1:2181 inside the container, then the broker; SIGTERM stops the
    broker cleanly, then ZooKeeper."""
    from tidelog.cluster.zookeeper import EmbeddedZooKeeper

    zookeeper = EmbeddedZooKeeper(STANDALONE_ZOOKEEPER, port=2181)
    zookeeper.start()
    environment = {"KAFKA_BROKER_ID": "1", **os.environ}
    properties = broker_properties(environment)
    properties.setdefault("zookeeper.connect", zookeeper.connect_string)
    write_config(properties)
    process = subprocess.Popen(broker_command(arguments))
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, _: process.send_signal(received))
    code = process.wait()
    zookeeper.stop()
    return code


def health() -> int:
    from tidelog.config import host_and_port, read_properties

    try:
        admin = read_properties(EFFECTIVE_CONFIG).get("admin.listener", DEFAULTS["admin.listener"])
        _, port = host_and_port(admin)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
            return 0
    except (OSError, ValueError) as error:
        print(f"not healthy: {error}")
        return 1


def main() -> int:
    mode, arguments = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("broker", [])
    if mode == "broker":
        broker(arguments)
    if mode == "standalone":
        return standalone(arguments)
    if mode == "health":
        return health()
    print(f"usage: {sys.argv[0]} broker|standalone|health [tidelog broker options]")
    return 2


if __name__ == "__main__":
    sys.exit(main())
