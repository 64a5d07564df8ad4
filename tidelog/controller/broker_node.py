"""One broker process: storage, the Kafka listener, the admin API and a ZooKeeper session."""

from __future__ import annotations

import asyncio
import importlib
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, KazooException, SessionExpiredError
from kazoo.protocol.states import WatchedEvent

from tidelog import fault_preload, gc_policy
from tidelog.broker.control import ControlRequests
from tidelog.broker.groups import GroupRequests, ReplicatedOffsetsLog
from tidelog.broker.handlers import RequestHandler
from tidelog.broker.log_dirs import LogDirRequests
from tidelog.broker.metadata import BrokerEndpoint, MetadataCache, TopicMetadata
from tidelog.broker.metrics import Metrics
from tidelog.broker.replica_manager import IsrChange, ReplicaManager
from tidelog.broker.server import ConnectionQuotas, KafkaServer
from tidelog.clock import Clock, SystemClock
from tidelog.config import connection_overrides, host_and_port
from tidelog.controller import controller, topics, zookeeper
from tidelog.controller.config_admin import ConfigRequests
from tidelog.controller.control_plane import ControlPlane
from tidelog.controller.producer_ids import ProducerIdRequests
from tidelog.controller.topic_admin import TopicAdminRequests
from tidelog.coordinator.coordinator import CoordinatorSettings, GroupCoordinator
from tidelog.coordinator.records import OFFSETS_TOPIC
from tidelog.errors import ErrorCode, KafkaError
from tidelog.log.config import LogConfig
from tidelog.log.manager import LogManager
from tidelog.replication.fetcher import FetcherSettings
from tidelog.replication.throttle import ReplicationThrottle
from tidelog.tiered.manager import RemoteLogManager
from tidelog.tiered.storage import RemoteStorageManager, split_rsm_config

if TYPE_CHECKING:
    from tidelog.broker.admin import AdminServer

log = logging.getLogger(__name__)

# threads laying out new partitions' logs on disk at once (mkdir and file creation wait on it)
LOG_OPENING_THREADS = 8


def _in_a_thread_of_its_own(work: Callable[[], None], name: str) -> asyncio.Future[None]:
    """``work`` run on a new thread (not the loop's default executor, which may be full of
    calls that wait); the future is done when it returns."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def run() -> None:
        try:
            work()
        except BaseException as error:  # handed to the awaiting task
            loop.call_soon_threadsafe(done.set_exception, error)
        else:
            loop.call_soon_threadsafe(done.set_result, None)

    threading.Thread(target=run, name=name, daemon=True).start()
    return done


class BrokerNode:
    """A broker: it registers in /brokers/ids, keeps its metadata cache in step with ZooKeeper
    through watches (a watch fired reads again the node it was set on, and sets it again; the
    whole cluster is read at start and after a session is lost, when every watch is), opens
    the logs of the partitions it leads, and serves clients. ``stop`` is a clean shutdown:
    listeners closed, ZooKeeper session closed (the registration goes with it), logs flushed
    with trimmed indexes and checkpoints written."""

    def __init__(self, config: dict[str, Any], clock: Clock | None = None) -> None:
        self.config = config
        self.broker_id: int = config["broker.id"]
        self.clock = clock or SystemClock(config["broker.clock.skew.ms"])
        self.metadata = MetadataCache()
        self.metrics = Metrics()
        self.logs = LogManager(config["log.dirs"], config, clock=self.clock)
        self.replicas = ReplicaManager(
            self.broker_id,
            self.logs,
            self.metadata,
            self.clock,
            persist_isr=self.persist_isr,
            fetcher_settings=FetcherSettings.from_config(config),
            replica_lag_time_max_ms=config["replica.lag.time.max.ms"],
            fetch_session_slots=config["max.incremental.fetch.session.cache.slots"],
        )
        self.throttle_rates = (
            config["leader.replication.throttled.rate"],
            config["follower.replication.throttled.rate"],
        )
        self.replicas.throttle = ReplicationThrottle(
            self.broker_id, self.metadata, *self.throttle_rates
        )
        self.remote: RemoteLogManager | None = None
        if config["remote.log.storage.system.enable"]:
            self.remote = RemoteLogManager(
                self.logs,
                RemoteStorageManager(config["remote.log.storage.uri"], split_rsm_config(config)),
                self.clock,
                leader_epoch_of=self.replicas.leader_epoch_if_leader,
                task_interval_ms=config["remote.log.manager.task.interval.ms"],
                reader_threads=config["remote.log.reader.threads"],
            )
            self.replicas.remote = self.remote
        self.handler = RequestHandler(
            self.broker_id,
            self.replicas,
            self.metadata,
            self.metrics,
            self.clock,
            auto_create_topics=config["auto.create.topics.enable"],
            create_topic=self.auto_create_topic,
            release=config["broker.protocol.max.version"],
            remote_fetch_max_wait_ms=config["remote.fetch.max.wait.ms"],
        )
        self.coordinator_settings = CoordinatorSettings.from_config(config)
        self.coordinator = GroupCoordinator(
            self.coordinator_settings,
            ReplicatedOffsetsLog(
                self.replicas,
                self.coordinator_settings.offsets_commit_required_acks,
                self.coordinator_settings.offsets_commit_timeout_ms,
            ),
            self.clock,
        )
        self.groups = GroupRequests(
            self.broker_id,
            self.coordinator,
            self.metadata,
            self.replicas,
            self.create_offsets_topic,
            _ZooKeeperOffsets(self),
        )
        self.handler.register(self.groups.handlers())
        self.topic_admin = TopicAdminRequests(
            self.metadata, lambda: self.zk, lambda: self.controller_epoch is not None
        )
        self.handler.register(self.topic_admin.handlers())
        self.config_admin = ConfigRequests(self.broker_id, config, lambda: self.zk)
        self.handler.register(self.config_admin.handlers())
        self.handler.register(LogDirRequests(self.logs).handlers())
        self.producer_ids = ProducerIdRequests(self.broker_id, lambda: self.zk)
        self.handler.register(self.producer_ids.handlers())
        quotas = ConnectionQuotas(
            config["max.connections.per.ip"],
            connection_overrides(config["max.connections.per.ip.overrides"]),
        )
        self.servers = [
            KafkaServer(
                self.handler,
                self.metrics,
                host=listener.host,
                port=listener.port,
                listener=listener.name,
                max_request_bytes=config["socket.request.max.bytes"],
                quotas=quotas,
                connections_max_idle_ms=config["connections.max.idle.ms"],
                max_inflight_requests=config["connection.max.inflight.requests"],
                max_inflight_bytes=config["connection.max.inflight.bytes"],
            )
            for listener in config["listeners"]
        ]
        self.control = ControlRequests(
            self.broker_id,
            self.metadata,
            self.replicas.apply_metadata,
            self.replicas.stop_replicas,
            self.replicas.hold_again,
        )
        self.control.shutdown_handler = self._answer_controlled_shutdown
        self.control_plane = ControlPlane(self.broker_id, config["controller.socket.timeout.ms"])
        # as controller: the brokers in a controlled shutdown (no leadership goes to them)
        self.shutting_down: set[int] = set()
        # this broker's controlled shutdown as answered by itself as controller, while it runs
        self._own_answer: asyncio.Task[dict] | None = None
        # as controller: the partitions being reassigned (left alone by the leader rebalance)
        self.reassigning: set[tuple[str, int]] = set()
        # The admin API's socket is bound before registration (its port is registered); the
        # server (aiohttp, whose import is about 40% of a broker's start-up CPU) starts in the
        # background meanwhile, so a restarted broker fetches without waiting for it. Requests
        # that come before it serves wait in the socket's backlog.
        self.admin_host, self.admin_port = host_and_port(config["admin.listener"])
        self.admin: AdminServer | None = None
        self._admin_socket: socket.socket | None = None
        self._admin_started: asyncio.Task | None = None
        self._admin_module: ModuleType | None = None  # tidelog.broker.admin, imported
        self.zk: KazooClient | None = None
        self.registered = False
        self.stopping = False
        self.controller_epoch: int | None = None  # set while this broker is the controller
        self._deletions_refused: list[str] = []  # logged once while delete.topic.enable=false
        self._loop: asyncio.AbstractEventLoop | None = None
        self._refresh_wanted = asyncio.Event()
        # the paths whose watches fired since the last refresh (added on kazoo's thread), and
        # whether the next refresh must read everything (at start, after a lost session or a
        # failed refresh: the watches set are not known)
        self._changed_paths: set[str] = set()
        self._read_everything = True
        self._paths_lock = threading.Lock()
        # the topics read from ZooKeeper with their watches set (a LeaderAndIsr may bring a
        # topic into the cache before that)
        self._topics_read: set[str] = set()
        self._tasks: list[asyncio.Task] = []
        self._register_metrics()

    def _register_metrics(self) -> None:
        self.metrics.gauges["tidelog_partitions"] = lambda: [({}, len(self.logs.logs))]
        self.metrics.gauges["tidelog_log_size_bytes"] = lambda: [
            ({"topic": t, "partition": str(p)}, partition_log.size_in_bytes)
            for (t, p), partition_log in self.logs
        ]
        self.metrics.gauges["tidelog_log_end_offset"] = lambda: [
            ({"topic": t, "partition": str(p)}, partition_log.log_end_offset)
            for (t, p), partition_log in self.logs
        ]
        self.metrics.gauges["tidelog_replica_fetch_bytes_total"] = lambda: [
            ({"leader": str(leader), "topic": t, "partition": str(p)}, size)
            for leader, fetcher in list(self.replicas.fetchers.items())
            for (t, p), size in list(fetcher.bytes_appended.items())
        ]
        cleaner = self.logs.cleaner
        for name in ("cleans", "bytes_read", "bytes_written", "messages_removed"):
            self.metrics.gauges[f"tidelog_log_cleaner_{name}_total"] = partial(
                lambda total: [({}, cleaner.totals[total])], name
            )
        self.metrics.gauges["tidelog_log_cleaner_last_clean_size_reduction"] = lambda: [
            ({"topic": t, "partition": str(p)}, stats.size_reduction)
            for (t, p), stats in list(cleaner.last_clean.items())
        ]
        if self.remote is not None:
            self.remote.register_metrics(self.metrics.gauges)
        self.metrics.gauges.update(gc_policy.gauges())

    # -- life cycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if fault_preload.active():
            self._load_before_threads()
        log.info(
            "broker %d starting: loading logs from %s", self.broker_id, self.config["log.dirs"]
        )
        self.zk = client = await asyncio.to_thread(
            zookeeper.connect,
            self.config["zookeeper.connect"],
            timeout=(
                self.config["zookeeper.connection.timeout.ms"]
                or self.config["zookeeper.session.timeout.ms"]
            )
            / 1000,
            session_timeout=self.config["zookeeper.session.timeout.ms"] / 1000,
            wait_for_server=True,
        )
        await asyncio.to_thread(zookeeper.ensure_layout, self.zk)
        await asyncio.to_thread(self._load_logs)
        if self.remote is not None:
            self.remote.startup()
        client.add_listener(self._on_session_state)
        # KIP-73's rates as kafka-reassign-partitions.sh --throttle sets them, followed live
        client.DataWatch(zookeeper.broker_config_path(self.broker_id), self._on_broker_config)
        for server in self.servers:
            await server.bind()
        self._bind_admin()
        self._admin_started = asyncio.create_task(self._start_admin())
        await asyncio.to_thread(self._register)
        await self.refresh_metadata()
        # Clients are served only once the metadata is known: an empty cache would answer
        # UNKNOWN_TOPIC (or auto-create) for topics that exist.
        for server in self.servers:
            await server.start()
        self.logs.scheduler.schedule(
            "ISR expiration",
            max(self.config["replica.lag.time.max.ms"] // 2, 50),
            self.replicas.check_isr,
        )
        self._tasks = [
            asyncio.create_task(self._refresh_on_watches()),
            asyncio.create_task(self.logs.scheduler.run_forever()),
            asyncio.create_task(self.coordinator.run_offset_expiry()),
        ]
        if self.config["auto.leader.rebalance.enable"]:
            self._tasks.append(asyncio.create_task(self._rebalance_leaders_periodically()))
        log.info(
            "broker %d started: Kafka protocol on %s, admin API on port %d",
            self.broker_id,
            ", ".join(f"{s.listener}://{s.host}:{s.port}" for s in self.servers),
            self.admin_port,
        )

    def _load_logs(self) -> None:
        """Opens the logs on disk with their topics' settings read from ZooKeeper first, as
        Kafka's LogManager is given them: a log's recovery depends on its topic's settings
        (a v0/v1 topic is not read for producer state, a v2 one is), which a log opened with
        the broker's defaults and corrected later by the metadata would get wrong."""
        configs = zookeeper.read_topic_configs(self.zk, self.logs.topics_on_disk())
        for name, overrides in configs.items():
            config = LogConfig.from_topic_config(overrides, self.logs.broker_config)
            self.logs.topic_configs[name] = config
        self.logs.startup()

    def _bind_admin(self) -> None:
        family = socket.AF_INET6 if ":" in self.admin_host else socket.AF_INET
        self._admin_socket = socket.create_server(
            (self.admin_host, self.admin_port), family=family, backlog=128
        )
        self._admin_socket.setblocking(False)
        self.admin_port = self._admin_socket.getsockname()[1]

    def _load_before_threads(self) -> None:
        """Loads now, before the broker starts a thread, the shared objects it would otherwise
        load once its threads run (tidelog.fault_preload says why that can hang a process under
        libfiu's preload): the admin API's (aiohttp's C extensions) and the remote tier's file
        system's (s3fs's; its making starts fsspec's thread, so it comes last). Name lookups
        load nothing where glibc (2.34 on) has the files and dns services built in, as in the
        broker image; a host whose nsswitch.conf names another service for hosts (mdns) loads
        it at the first name /etc/hosts does not answer, which tidelog's local brokers, all on
        numeric addresses or localhost, do not look up. (The loop watchdog's thread, which
        TIDELOG_LOOP_WATCHDOG_MS starts for benchmarks, runs already.)"""
        log.info(
            "broker %d: under libfiu's preload: loading modules before threads start",
            self.broker_id,
        )
        self._admin_module = importlib.import_module("tidelog.broker.admin")
        if self.remote is not None:
            self.remote.storage.fs  # noqa: B018 (the property makes the file system)

    async def _start_admin(self) -> None:
        """Imports the admin API off the event loop (unless it is loaded already), then serves
        it on the bound socket."""
        module = self._admin_module
        try:
            if module is None:
                module = await asyncio.to_thread(importlib.import_module, "tidelog.broker.admin")
        except Exception:
            log.exception("broker %d: the admin API could not be loaded", self.broker_id)
            raise
        admin = module.AdminServer(
            self.broker_id,
            self.metadata,
            self.logs,
            self.metrics,
            host=self.admin_host,
            port=self.admin_port,
            is_registered=lambda: self.registered,
            clock=self.clock,
            control=self.control,
            replicas=self.replicas,
            remote=self.remote,
            sock=self._admin_socket,
        )
        await admin.start()
        self.admin = admin

    def advertised_endpoint(self) -> BrokerEndpoint:
        """This broker as others and clients reach it: the advertised listeners, with a port
        of 0 (any free port) replaced by the one bound and an empty host by this host's name."""
        bound = {server.listener: server for server in self.servers}
        listeners = []
        for listener in self.config["advertised.listeners"]:
            server = bound[listener.name]
            host = listener.host
            if host in ("", "0.0.0.0", "::"):
                host = socket.getfqdn()
            listeners.append((listener.name, host, listener.port or server.port))
        inter_broker = self.config["inter.broker.listener.name"]
        _, host, port = next(entry for entry in listeners if entry[0] == inter_broker)
        # An admin API on every interface (a container's 0.0.0.0) is reached, like the
        # inter-broker listener, at that listener's advertised host.
        admin_host = host if self.admin_host in ("", "0.0.0.0", "::") else self.admin_host
        return BrokerEndpoint(
            self.broker_id,
            host,
            port,
            self.config["broker.rack"],
            f"{admin_host}:{self.admin_port}",
            tuple(listeners),
        )

    def _register(self) -> None:
        zookeeper.register_broker(
            self.zk, self.advertised_endpoint(), remote_log_storage=self.remote is not None
        )
        self.registered = True
        log.info("broker %d registered in ZooKeeper", self.broker_id)

    async def stop(self) -> None:
        log.info("broker %d shutting down cleanly", self.broker_id)
        self.stopping = True
        self.control.stopping = True  # a StopReplica without delete is taken from now
        if self.config["controlled.shutdown.enable"] and self.registered:
            await self._controlled_shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.replicas.stop()
        await self.control_plane.close()
        for server in self.servers:
            await server.stop()
        self.coordinator.stop()
        if self._admin_started is not None:
            self._admin_started.cancel()
            await asyncio.gather(self._admin_started, return_exceptions=True)
        if self.admin is not None:
            await self.admin.stop()
        elif self._admin_socket is not None:
            self._admin_socket.close()
        if self._own_answer is not None:
            self._own_answer.cancel()  # its thread is freed by the session's close
        if self.zk is not None:
            self.registered = False
            # on a thread of its own: calls waiting on an unreachable ZooKeeper may hold every
            # thread of the default executor, and only this close frees them
            await _in_a_thread_of_its_own(self._close_zookeeper, "zookeeper-close")
        if self.remote is not None:
            await asyncio.to_thread(self.remote.shutdown)
        await asyncio.to_thread(self.logs.shutdown)
        log.info("broker %d stopped", self.broker_id)

    async def _controlled_shutdown(self) -> None:
        """Asks the controller to move every leadership this broker holds to another in-sync
        replica and to take it out of the ISR of the partitions it follows, as Kafka's
        controlled shutdown: up to controlled.shutdown.max.retries attempts,
        controlled.shutdown.retry.backoff.ms apart. Then, or once they are spent, the broker
        stops as it would without (its session's end makes the controller elect for what is
        left)."""
        attempts = self.config["controlled.shutdown.max.retries"]
        backoff_s = self.config["controlled.shutdown.retry.backoff.ms"] / 1000
        for attempt in range(1, attempts + 1):
            answer = await self._ask_for_controlled_shutdown()
            if answer is not None and not answer.get("error_code"):
                remaining = answer.get("partitions_remaining", [])
                stuck = answer.get("partitions_stuck", [])
                if stuck:
                    log.warning(
                        "controlled shutdown: %d partitions led here have no other live "
                        "in-sync replica to take them (%s)",
                        len(stuck),
                        ", ".join(f"{t}-{p}" for t, p in stuck[:5]),
                    )
                if not remaining:
                    log.info("broker %d: controlled shutdown succeeded", self.broker_id)
                    # no follower starts again on a broker about to stop
                    self.control.applying = False
                    return
                log.info(
                    "controlled shutdown: %d partitions still led here, attempt %d of %d",
                    len(remaining),
                    attempt,
                    attempts,
                )
            if attempt < attempts:
                await asyncio.sleep(backoff_s)
        log.warning(
            "broker %d: controlled shutdown did not complete in %d attempts; shutting down anyway",
            self.broker_id,
            attempts,
        )

    async def _ask_for_controlled_shutdown(self) -> dict | None:
        """One ControlledShutdown request to the controller (itself, if it is); None if there
        is no controller or it did not answer in controller.socket.timeout.ms. A controller
        answering itself waits as long at most: its answer writes to ZooKeeper, which blocks
        while ZooKeeper is unreachable (the thread waiting there is freed when the broker
        closes its session)."""
        timeout_s = self.config["controller.socket.timeout.ms"] / 1000
        controller_id = self.metadata.controller_id
        if controller_id == self.broker_id:
            # an answer still being worked out is waited for again, not started anew: each
            # holds a thread of the default executor while ZooKeeper does not answer
            if self._own_answer is None or self._own_answer.done():
                if self._own_answer is not None and not self._own_answer.cancelled():
                    self._own_answer.exception()  # one that failed after its wait: dropped
                self._own_answer = asyncio.create_task(
                    self._answer_controlled_shutdown(self.broker_id)
                )
            try:
                return await asyncio.wait_for(asyncio.shield(self._own_answer), timeout_s)
            except TimeoutError:
                log.info(
                    "controlled shutdown: no answer as controller in %g s "
                    "(controller.socket.timeout.ms): its ZooKeeper writes are waiting",
                    timeout_s,
                )
                return None
            except KazooException as error:
                # a request out as the connection dropped fails at once (later ones wait):
                # no answer this attempt, as from a controller that did not answer
                log.info(
                    "controlled shutdown: no answer as controller: ZooKeeper failed its "
                    "request (%s)",
                    type(error).__name__,
                )
                return None
        endpoint = self.metadata.brokers.get(controller_id)
        if endpoint is None or endpoint.admin is None:
            log.info("controlled shutdown: no controller known yet")
            return None
        import aiohttp

        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as client,
                client.post(
                    f"http://{endpoint.admin}/control/controlled-shutdown",
                    json={"broker_id": self.broker_id},
                ) as reply,
            ):
                answer: dict = await reply.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            log.info(
                "controlled shutdown: controller %d did not answer (%s)",
                controller_id,
                str(error) or type(error).__name__,
            )
            return None
        if answer.get("error_code"):
            log.info("controlled shutdown: controller %d answered %s", controller_id, answer)
        return answer

    async def _answer_controlled_shutdown(self, broker_id: int) -> dict:
        """As controller: moves leadership away from ``broker_id`` (controller.move_away_from),
        tells the brokers concerned, and answers with what it still leads."""
        if self.controller_epoch is None:
            return {"error_code": int(ErrorCode.NOT_CONTROLLER), "partitions_remaining": []}
        if broker_id not in self.metadata.brokers:
            return {"error_code": int(ErrorCode.BROKER_NOT_AVAILABLE), "partitions_remaining": []}
        self.shutting_down.add(broker_id)
        # as Kafka's controller, the replicas the broker follows are stopped first (StopReplica
        # without delete), before the writes that take it out of their ISRs: a follower that
        # fetched on, caught up, would be taken back into each ISR by its leader until it
        # exits. Its answer is waited for (up to controller.socket.timeout.ms): the broker
        # also reads states from its own ZooKeeper watch, and one that came before the
        # StopReplica would have it follow in the new epoch. The states written for them are
        # then told to their other replicas only.
        followed = self._followed_by(broker_id)
        controller_epoch = self.controller_epoch
        if followed:
            await self.control_plane.stop_replicas(self.metadata, followed, delete=False)
            if self.controller_epoch != controller_epoch:  # resigned meanwhile
                return {"error_code": int(ErrorCode.NOT_CONTROLLER), "partitions_remaining": []}
        # writes lost to concurrent changes are tried again for half the time the stopping
        # broker waits for this answer (controller.socket.timeout.ms), the rest left to its
        # next attempt
        retry_s = self.config["controller.socket.timeout.ms"] / 2000
        moves = await asyncio.to_thread(
            controller.move_away_from,
            self.zk,
            broker_id,
            self.controller_epoch,
            self.metadata.copy_of_topics(),
            set(self.shutting_down),
            time.monotonic() + retry_s,
        )
        self._take_changes(moves.changes)
        # queued, not waited for, as Kafka's controller answers: one unresponsive broker (a
        # paused follower that is now to lead) must not hold the stopping broker up
        await self.control_plane.send(
            self.metadata, moves.changes, moves.brokers, wait=False, not_told=set(followed)
        )
        log.info(
            "controller: controlled shutdown of broker %d: %d states written, %d partitions "
            "left to move, %d with no other in-sync replica",
            broker_id,
            len(moves.changes),
            len(moves.remaining),
            len(moves.stuck),
        )
        return {
            "error_code": 0,
            "partitions_remaining": [list(key) for key in moves.remaining],
            "partitions_stuck": [list(key) for key in moves.stuck],
        }

    def _followed_by(self, broker_id: int) -> list[tuple[str, int, int]]:
        """(topic, partition, ``broker_id``) of each partition with more than one replica that
        the broker holds and, as the controller last knew, does not lead."""
        return [
            (name, number, broker_id)
            for name, topic in self.metadata.topics.items()
            for number, replicas in topic.assignment.items()
            if broker_id in replicas
            and len(replicas) > 1
            and (state := topic.states.get(number)) is not None
            and state.leader != broker_id
        ]

    async def _advance_reassignments(self, live: set[int]) -> None:
        """One step of every partition reassignment (controller.advance_reassignments): the
        states it wrote told to the brokers, the old replicas stopped and deleted."""
        assert self.controller_epoch is not None  # called by the controller only
        step = await asyncio.to_thread(
            controller.advance_reassignments, self.zk, self.controller_epoch, live
        )
        self.reassigning = step.moving
        for text in step.finished.values():
            (log.warning if "dropped" in text or "no such" in text else log.info)(
                "controller: %s", text
            )
        if step.changes:
            for change in step.changes:
                topic = self.metadata.topics.get(change.topic)
                if topic is not None:
                    topic.assignment[change.partition] = change.replicas
            self._take_changes(step.changes)
            await self.control_plane.send(self.metadata, step.changes)
        if step.retired:
            await self.control_plane.stop_replicas(self.metadata, step.retired, delete=True)

    async def _rebalance_leaders_periodically(self) -> None:
        """As controller, every leader.imbalance.check.interval.seconds: a preferred leader
        election for the partitions controller.imbalanced_partitions finds due."""
        interval_s = self.config["leader.imbalance.check.interval.seconds"]
        while True:
            await asyncio.sleep(interval_s)
            if self.controller_epoch is None or self.stopping:
                continue
            try:
                await self.rebalance_leaders()
            except (ConnectionLoss, SessionExpiredError) as error:
                log.warning("leader rebalance: ZooKeeper is unreachable (%s)", type(error).__name__)
            except Exception:
                log.exception("leader rebalance failed; trying again at the next check")

    async def rebalance_leaders(self) -> None:
        epoch = self.controller_epoch
        if epoch is None:
            return
        cache = self.metadata.copy_of_topics()
        cache.deleting = set(self.metadata.deleting)
        live = set(self.metadata.brokers)
        due = controller.imbalanced_partitions(
            cache,
            live,
            self.config["leader.imbalance.per.broker.percentage"],
            frozenset(self.shutting_down),
        )
        due = [key for key in due if key not in self.reassigning]
        if not due:
            return
        changes = await asyncio.to_thread(
            controller.elect_preferred_leaders, self.zk, due, live - self.shutting_down, epoch
        )
        moved = [change for change in changes if change.state is not None]
        if moved:
            log.info(
                "controller: automatic leader rebalance moved %d of %d partitions off their "
                "preferred replica",
                len(moved),
                len(due),
            )
            self._take_changes(moved)
            await self.control_plane.send(self.metadata, moved)

    def _take_changes(self, changes: list[controller.Change]) -> None:
        """The states the controller wrote go into its cache now (their watches bring them
        again), and its replica manager acts on them."""
        for change in changes:
            text = change.description
            (log.warning if "UNCLEAN" in text or "offline" in text else log.info)(
                "controller: %s", text
            )
        if changes:
            for change in changes:
                topic = self.metadata.topics.get(change.topic)
                if change.state is not None and topic is not None:
                    topic.states[change.partition] = change.state
            if self.control.applying:
                self.replicas.apply_metadata()

    def _close_zookeeper(self) -> None:
        if self.zk is not None:
            self.zk.stop()
            self.zk.close()

    async def run_until_signalled(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        gc_policy.prepare()
        await self.start()
        stopping = asyncio.create_task(stop.wait())
        # the admin API's modules are loaded before the heap is frozen; a signal meanwhile
        # stops the broker without waiting for them
        admin = [self._admin_started] if self._admin_started else []
        await asyncio.wait([stopping, *admin], return_when=asyncio.FIRST_COMPLETED)
        if not stop.is_set():
            frozen = gc_policy.freeze_started()
            log.info(
                "broker %d: froze the %d objects held since start (the garbage collector walks "
                "them no more)",
                self.broker_id,
                frozen,
            )
        await stopping
        await self.stop()

    # -- ZooKeeper -----------------------------------------------------------------------------

    def _on_watch(self, event: WatchedEvent | None = None) -> None:
        """Called on kazoo's thread when a watched znode changes (an event without a path: the
        session's watches are gone, and everything is read again)."""
        with self._paths_lock:
            if event is None or event.path is None:
                self._read_everything = True
            else:
                self._changed_paths.add(event.path)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._refresh_wanted.set)

    def _take_changed_paths(self) -> set[str] | None:
        """The paths to read again, or None to read everything."""
        with self._paths_lock:
            paths, self._changed_paths = self._changed_paths, set()
            everything, self._read_everything = self._read_everything, False
        return None if everything else paths

    def _on_broker_config(self, data: bytes | None, _stat: object = None) -> None:
        """/config/brokers/{id} changed (on kazoo's thread): the throttled rates it sets, or
        this broker's settings where it sets none."""
        config = zookeeper.parse_entity_config(data)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._set_throttle_rates, config)

    def _set_throttle_rates(self, config: dict[str, str]) -> None:
        assert self.replicas.throttle is not None
        self.replicas.throttle.set_rates(config, self.throttle_rates)
        log.info(
            "replication throttle: leader %d B/s, follower %d B/s",
            self.replicas.throttle.leader.rate,
            self.replicas.throttle.follower.rate,
        )

    def _on_session_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self.registered = False
            with self._paths_lock:
                self._read_everything = True  # a new session has none of the watches
            if not self.stopping:
                log.warning("broker %d lost its ZooKeeper session", self.broker_id)
        elif state == KazooState.CONNECTED and self._loop is not None and not self.registered:
            self._loop.call_soon_threadsafe(self._reregister_soon)

    def _reregister_soon(self) -> None:
        self._tasks.append(asyncio.create_task(self._reregister()))

    async def _reregister(self) -> None:
        try:
            await asyncio.to_thread(self._register)
            self._refresh_wanted.set()
        except Exception:
            log.exception("broker %d could not register again", self.broker_id)

    async def _refresh_on_watches(self) -> None:
        while True:
            await self._refresh_wanted.wait()
            self._refresh_wanted.clear()
            try:
                await self.refresh_metadata()
            except (ConnectionLoss, SessionExpiredError) as error:
                log.warning(
                    "metadata refresh: ZooKeeper is unreachable (%s); retrying in 1 s",
                    type(error).__name__,
                )
                self._read_everything_next()
                await asyncio.sleep(1)
                self._refresh_wanted.set()
            except Exception:
                log.exception("metadata refresh from ZooKeeper failed; retrying in 1 s")
                self._read_everything_next()
                await asyncio.sleep(1)
                self._refresh_wanted.set()

    def _read_everything_next(self) -> None:
        """A refresh failed midway: which watches it set again is not known."""
        with self._paths_lock:
            self._read_everything = True

    async def refresh_metadata(self) -> None:
        await self.refresh_metadata_only()
        await self._act_as_controller()

    async def refresh_metadata_only(self) -> None:
        """Brings the metadata cache up to date: everything read when ``_read_everything``,
        else only the nodes whose watches fired."""
        paths = self._take_changed_paths()
        if paths is None:
            fresh = await asyncio.to_thread(zookeeper.read_cluster, self.zk, self._on_watch)
            await self._open_new_logs(
                fresh.topics,
                {n: t for n, t in fresh.topics.items() if n not in fresh.deleting},
            )
            self.metadata.brokers = fresh.brokers
            self.metadata.topics = fresh.topics
            self.metadata.controller_id = fresh.controller_id
            self.metadata.cluster_id = fresh.cluster_id
            self.metadata.deleting = fresh.deleting
            self._topics_read = set(fresh.topics)
        elif paths:
            delta = await asyncio.to_thread(
                zookeeper.read_changes, self.zk, paths, set(self._topics_read), self._on_watch
            )
            topics = {**self.metadata.topics, **delta.topics}
            changed = {**delta.topics}
            for (name, number), state in delta.states.items():
                if state is not None and name in topics and name not in delta.topics:
                    if name not in changed:  # a copy that has the new states too
                        known = topics[name]
                        changed[name] = TopicMetadata(
                            name, known.assignment, dict(known.states), known.config
                        )
                    changed[name].states[number] = state
            for name in delta.removed | (delta.deleting or self.metadata.deleting):
                changed.pop(name, None)  # its logs are being deleted: not to be made again
            await self._open_new_logs(topics, changed)
            delta.apply_to(self.metadata)
            self._topics_read = (self._topics_read | set(delta.topics)) - delta.removed
        else:
            return
        self.replicas.apply_metadata()

    async def _open_new_logs(
        self, topics: dict[str, TopicMetadata], changed: dict[str, TopicMetadata]
    ) -> None:
        """Opens the logs of partitions newly assigned here (among the ``changed`` topics of
        ``topics``) in worker threads: a new topic of a thousand partitions takes seconds to
        lay out on disk, which the event loop (fetches, ISR checks, heartbeats) cannot wait
        for. Creating directories and files waits on the disk, so several threads share it."""
        wanted = [
            (name, number)
            for name, topic in changed.items()
            for number, replicas in topic.assignment.items()
            if self.broker_id in replicas
            and number in topic.states
            and self.logs.get(name, number) is None
            and (name, number) not in self.logs.opening
        ]
        if not wanted:
            return
        for name in {name for name, _ in wanted}:
            config = LogConfig.from_topic_config(topics[name].config, self.logs.broker_config)
            if self.logs.topic_configs.get(name) != config:
                self.logs.update_topic_config(name, config)
        placed = self.logs.place(wanted)
        self.logs.opening.update(wanted)
        try:
            with ThreadPoolExecutor(min(len(placed), LOG_OPENING_THREADS)) as pool:
                opened = await asyncio.gather(
                    *(
                        asyncio.wrap_future(pool.submit(self.logs.open_new, key, where))
                        for key, where in placed
                    )
                )
        finally:
            self.logs.opening.difference_update(wanted)
        for (key, where), new_log in zip(placed, opened, strict=True):
            self.logs.add_new(key, where, new_log)

    async def _act_as_controller(self) -> None:
        """Stands for controller when there is none; as controller, reconciles the cluster."""
        if self.metadata.controller_id != self.broker_id and self.controller_epoch is not None:
            self.controller_epoch = None
            await self.control_plane.resign()
        if self.metadata.controller_id < 0 and self.registered:
            epoch = await asyncio.to_thread(
                controller.try_to_become_controller, self.zk, self.broker_id
            )
            if epoch is not None:
                self.controller_epoch = epoch
                self.metadata.controller_id = self.broker_id
                await self.control_plane.start_epoch(epoch)
                log.info("broker %d is the controller, epoch %d", self.broker_id, epoch)
        if self.controller_epoch is not None:
            done = await asyncio.to_thread(
                controller.reconcile,
                self.zk,
                self.controller_epoch,
                self.config["unclean.leader.election.enable"],
                self.metadata.copy_of_topics(),
                frozenset(self.shutting_down),
            )
            self.shutting_down &= set(done.brokers)  # those that have stopped are done
            self._take_changes(done.changes)
            await self.control_plane.send(self.metadata, done.changes, done.brokers)
            await self._advance_reassignments(set(done.brokers))
            await self._delete_requested_topics()

    async def _delete_requested_topics(self) -> None:
        """Topic deletion: StopReplica (with delete) to every live replica, then the topic
        leaves ZooKeeper. A replica down at the time keeps its files until it is cleaned up by
        hand; the topic is gone from the cluster either way. With delete.topic.enable=false the
        request stays in /admin/delete_topics and the topic stays, as in Kafka."""
        pending = await asyncio.to_thread(zookeeper.pending_topic_deletions, self.zk)
        if pending and not self.config["delete.topic.enable"]:
            if pending != self._deletions_refused:
                log.warning(
                    "controller: topics %s are marked for deletion, but delete.topic.enable is "
                    "false: they stay",
                    ", ".join(pending),
                )
                self._deletions_refused = pending
            return
        assert self.controller_epoch is not None  # called by the controller only
        for topic in pending:
            acknowledged = await self.control_plane.stop_topic_replicas(
                self.metadata, topic, delete=True
            )
            await asyncio.to_thread(zookeeper.delete_topic_nodes, self.zk, topic)
            log.info(
                "controller: deleted topic %s (its replicas on brokers %s)", topic, acknowledged
            )

    async def persist_isr(self, changes: list[IsrChange]) -> list[bool | None]:
        """Writes new ISRs (topic, partition, leader epoch, ISR) to the partitions' states, all
        at once; False for one not written (a newer state there, or no ZooKeeper session while
        reading them: the next ISR check tries again), None for one whose reply was lost."""
        try:
            return await asyncio.to_thread(zookeeper.update_isrs, self.zk, self.broker_id, changes)
        except (ConnectionLoss, SessionExpiredError) as error:
            log.warning(
                "ISR of %d partitions (%s) not written, ZooKeeper is unreachable (%s); will try "
                "again",
                len(changes),
                ", ".join(f"{t}-{p}" for t, p, _, _ in changes[:5]),
                type(error).__name__,
            )
            return [False] * len(changes)

    async def auto_create_topic(self, topic: str) -> None:
        partitions = self.config["num.partitions"]
        replication_factor = self.config["default.replication.factor"]
        try:
            await asyncio.to_thread(
                topics.create_topic, self.zk, topic, partitions, replication_factor
            )
            log.info(
                "auto-created topic %s with %d partitions, replication factor %d",
                topic,
                partitions,
                replication_factor,
            )
        except KafkaError as error:
            if error.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("could not auto-create topic %s: %s", topic, error)

    async def create_offsets_topic(self) -> None:
        """``__consumer_offsets`` on first use, with Kafka's settings: offsets.topic.* partitions
        and segment size, compacted, replication factor offsets.topic.replication.factor or the
        number of live brokers if fewer."""
        settings = self.coordinator_settings
        live = len(self.metadata.brokers)
        replication_factor = min(settings.offsets_topic_replication_factor, live)
        config = {
            "cleanup.policy": "compact",
            "segment.bytes": str(settings.offsets_topic_segment_bytes),
        }
        try:
            await asyncio.to_thread(
                topics.create_topic,
                self.zk,
                OFFSETS_TOPIC,
                settings.offsets_topic_partitions,
                replication_factor,
                config,
            )
            log.info(
                "created %s: %d partitions, replication factor %d",
                OFFSETS_TOPIC,
                settings.offsets_topic_partitions,
                replication_factor,
            )
        except KafkaError as error:
            if error.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("could not create %s: %s", OFFSETS_TOPIC, error)


class _ZooKeeperOffsets:
    """OffsetCommit/OffsetFetch v0 through the broker's ZooKeeper session."""

    def __init__(self, node: BrokerNode) -> None:
        self.node = node

    async def write(self, group: str, topic: str, partition: int, offset: int) -> None:
        await asyncio.to_thread(
            zookeeper.write_consumer_offset, self.node.zk, group, topic, partition, offset
        )

    async def read(self, group: str, topic: str, partition: int) -> int | None:
        return await asyncio.to_thread(
            zookeeper.read_consumer_offset, self.node.zk, group, topic, partition
        )
