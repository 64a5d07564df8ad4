"""tidelog for other projects' tests: ``TidelogContainer``, one broker with its own ZooKeeper.

    from kafka import KafkaProducer
    from tidelog.testing import TidelogContainer

    with TidelogContainer() as tidelog:
        producer = KafkaProducer(bootstrap_servers=tidelog.get_bootstrap_server())

It works as testcontainers' ``KafkaContainer`` does, on the standalone image
(``docker/standalone.Dockerfile``; ``make images`` builds it as ``tidelog-standalone:dev``). This
is the one module of tidelog that imports testcontainers (a test-time dependency, in the ``dev``
extra), so the product never needs it.
"""

from __future__ import annotations

import os
import time
from typing import Any

from testcontainers.core.container import DockerContainer

from tidelog.cluster.compose import kafka_variable
from tidelog.cluster.zookeeper import free_port

# scripts/docker-engine.sh tags its images TIDELOG_TAG (dev unless set), as compose.yaml reads it.
DEFAULT_IMAGE = f"tidelog-standalone:{os.environ.get('TIDELOG_TAG', 'dev')}"


class TidelogContainer(DockerContainer):
    """A container running ZooKeeper and broker 1, reachable from the host at
    ``get_bootstrap_server()`` (127.0.0.1 only).

    The broker's one listener has the same port inside the container and on the host, and is
    advertised as 127.0.0.1:port, so a client on the host (through the published port) and one
    inside the container both reach it at the address Metadata gives them. ``start`` returns
    once the broker is registered and serving (the image's healthcheck)."""

    def __init__(self, image: str = DEFAULT_IMAGE, port: int | None = None, **kwargs: Any) -> None:
        super().__init__(image, **kwargs)
        self.port = port or free_port()
        self.ports[f"{self.port}/tcp"] = ("127.0.0.1", self.port)  # type: ignore[assignment]
        self.with_config("listeners", f"PLAINTEXT://0.0.0.0:{self.port}")
        self.with_config("advertised.listeners", f"PLAINTEXT://127.0.0.1:{self.port}")

    def with_config(self, key: str, value: str) -> TidelogContainer:
        """A broker setting under Kafka's name (``num.partitions``, ``log.segment.bytes``...)."""
        self.with_env(kafka_variable(key), value)
        return self

    def start(self, timeout: float = 90.0) -> TidelogContainer:
        super().start()
        container = self.get_wrapped_container()
        deadline = time.monotonic() + timeout
        while True:
            container.reload()
            state = container.attrs["State"]
            if state.get("Health", {}).get("Status") == "healthy":
                return self
            if state["Status"] == "exited" or time.monotonic() > deadline:
                logs = container.logs(tail=20).decode(errors="replace")
                self.stop()
                raise RuntimeError(
                    f"tidelog container {state['Status']}, not healthy after {timeout} s "
                    f"waiting for its broker to register; its log ends with:\n{logs}"
                )
            time.sleep(0.5)

    def get_bootstrap_server(self) -> str:
        return f"127.0.0.1:{self.port}"
