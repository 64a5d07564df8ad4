"""The admin HTTP API (aiohttp): health, Prometheus metrics, topics and their partitions."""

from __future__ import annotations

import inspect
import logging
import socket
from collections.abc import Callable

from aiohttp import web

from tidelog.broker.control import ControlRequests
from tidelog.broker.metadata import MetadataCache
from tidelog.broker.metrics import Metrics
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.log.manager import LogManager
from tidelog.tiered.manager import RemoteLogManager

log = logging.getLogger(__name__)


class AdminServer:
    """GET /health, /metrics, /topics, /topics/{topic} and /fetch-sessions, bound to
    127.0.0.1 by default."""

    def __init__(
        self,
        broker_id: int,
        metadata: MetadataCache,
        logs: LogManager,
        metrics: Metrics,
        *,
        host: str,
        port: int,
        is_registered: Callable[[], bool],
        clock: object | None = None,
        control: ControlRequests | None = None,
        replicas: ReplicaManager | None = None,
        remote: RemoteLogManager | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        self.sock = sock  # bound already (its port registered): served instead of binding
        self.replicas = replicas
        self.clock = clock
        self.control = control
        self.remote = remote
        self.broker_id = broker_id
        self.metadata = metadata
        self.logs = logs
        self.metrics = metrics
        self.host, self.port = host, port
        self.is_registered = is_registered
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.add_routes(
            [
                web.get("/health", self.health),
                web.get("/metrics", self.prometheus),
                web.get("/topics", self.topics),
                web.get("/topics/{topic}", self.topic),
                web.get("/fetch-sessions", self.fetch_sessions),
                web.put("/clock", self.set_clock),
                web.post("/control/{kind}", self.control_request),
            ]
        )
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site: web.BaseSite
        if self.sock is not None:
            site = web.SockSite(self._runner, self.sock)
        else:
            site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        log.info("admin API on http://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def health(self, request: web.Request) -> web.Response:
        registered = self.is_registered()
        body = {
            "broker_id": self.broker_id,
            "registered": registered,
            "status": "ok" if registered else "starting",
            "brokers": sorted(self.metadata.brokers),  # the live brokers this broker knows of
        }
        return web.json_response(body, status=200 if registered else 503)

    async def control_request(self, request: web.Request) -> web.Response:
        """POST /control/{leader-and-isr,update-metadata,stop-replica}: the controller's
        requests (see tidelog.broker.control)."""
        kinds = {
            "leader-and-isr": "leader_and_isr",
            "update-metadata": "update_metadata",
            "stop-replica": "stop_replica",
            "controlled-shutdown": "controlled_shutdown",
        }
        kind = request.match_info["kind"]
        if self.control is None or kind not in kinds:
            return web.json_response({"error": f"no control request {kind!r}"}, status=404)
        try:
            body = await request.json()
            answer = getattr(self.control, kinds[kind])(body)
            if inspect.isawaitable(answer):  # one the controller answers after its writes
                answer = await answer
        except (ValueError, KeyError, TypeError) as error:
            return web.json_response({"error": f"malformed {kind} request: {error!r}"}, status=400)
        return web.json_response(answer)

    async def set_clock(self, request: web.Request) -> web.Response:
        """PUT /clock {"skew_ms": N}: a testbed setting (broker.clock.skew.ms), changed live."""
        try:
            skew = int((await request.json())["skew_ms"])
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": 'expected {"skew_ms": <integer>}'}, status=400)
        if not hasattr(self.clock, "skew_ms"):
            return web.json_response({"error": "this broker's clock cannot be skewed"}, status=409)
        self.clock.skew_ms = skew
        log.warning("broker %d clock skew set to %d ms through the admin API", self.broker_id, skew)
        return web.json_response({"skew_ms": skew})

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics.render(), content_type="text/plain", charset="utf-8")

    async def fetch_sessions(self, request: web.Request) -> web.Response:
        """GET /fetch-sessions: the incremental fetch sessions followers hold here ("leader")
        and those this broker holds with each leader it follows ("follower")."""
        if self.replicas is None:
            return web.json_response({"error": "no replica manager"}, status=404)
        return web.json_response(
            {
                "leader": self.replicas.fetch_sessions.describe(),
                "follower": {
                    str(leader): fetcher.describe_session()
                    for leader, fetcher in sorted(self.replicas.fetchers.items())
                },
            }
        )

    async def topics(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                name: {"partitions": len(topic.assignment), "config": topic.config}
                for name, topic in sorted(self.metadata.topics.items())
            }
        )

    async def topic(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        topic = self.metadata.topics.get(name)
        if topic is None:
            return web.json_response({"error": f"no topic {name!r}"}, status=404)
        partitions = []
        for partition, replicas in sorted(topic.assignment.items()):
            state = topic.states.get(partition)
            entry = {
                "partition": partition,
                "leader": self.metadata.leader_of(name, partition),
                "replicas": list(replicas),
                "isr": list(state.isr) if state else [],
                "leader_epoch": state.leader_epoch if state else -1,
            }
            partition_log = self.logs.get(name, partition)
            if partition_log is not None:
                entry.update(
                    log_start_offset=partition_log.log_start_offset,
                    log_end_offset=partition_log.log_end_offset,
                    high_watermark=partition_log.high_watermark,
                    size_bytes=partition_log.size_in_bytes,
                    local_log_start_offset=partition_log.local_log_start_offset,
                    local_size_bytes=partition_log.size_in_bytes,
                    **(
                        self.remote.partition_summary((name, partition), partition_log)
                        if self.remote is not None
                        else {"remote_log_start_offset": -1, "remote_size_bytes": 0}
                    ),
                    segments=[
                        {"base_offset": s.base_offset, "next_offset": s.next_offset, "size": s.size}
                        for s in partition_log.segments
                    ],
                )
                last_clean = self.logs.cleaner.last_clean.get((name, partition))
                if last_clean is not None:
                    entry["last_clean"] = last_clean.as_dict()
            partitions.append(entry)
        return web.json_response({"topic": name, "config": topic.config, "partitions": partitions})
