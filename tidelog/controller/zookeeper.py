"""Kafka's ZooKeeper layout, as small named operations over a kazoo client.

Paths and JSON documents are Kafka's own, so Kafka tooling reading the same ensemble sees a
familiar cluster:

    /brokers/ids/{id}                            ephemeral: endpoints, host, port
    /brokers/topics/{t}                          {"version":1,"partitions":{"0":[1,2]}}
    /brokers/topics/{t}/partitions/{p}/state     leader, leader_epoch, isr, controller_epoch
    /config/topics/{t}                           {"version":1,"config":{...}}
    /controller, /controller_epoch, /cluster/id, /admin/delete_topics
    /latest_producer_id_block                    {"version":1,"broker":1,"block_start":"0",...}

Every operation is blocking (kazoo) and safe to call again; callers in asyncio run them in a
thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)

from tidelog.broker.metadata import (
    BrokerEndpoint,
    MetadataCache,
    MetadataDelta,
    PartitionState,
    TopicMetadata,
)
from tidelog.reach import Unreachable, refusal

BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
TOPIC_CONFIGS = "/config/topics"
BROKER_CONFIGS = "/config/brokers"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CLUSTER_ID = "/cluster/id"
DELETE_TOPICS = "/admin/delete_topics"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
# producer ids a broker takes at a time (Kafka's ProducerIdManager.PidBlockSize)
PRODUCER_ID_BLOCK_SIZE = 1000
LONG_MAX = 2**63 - 1

Watcher = Callable[..., object]
# partitions created per ZooKeeper transaction: about 250 bytes each, well inside the 1 MB a
# request may hold (jute.maxbuffer)
CREATE_BATCH = 1000
log = logging.getLogger(__name__)


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def _json(data: bytes) -> dict:
    return json.loads(data.decode("utf-8")) if data else {}


def _dump(document: dict) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode("utf-8")


def _read(zk: KazooClient, path: str, watch: Watcher | None) -> bytes | None:
    """The data at ``path``, or None if there is no such node. With ``watch``, the watch is
    set either way (on a missing node it fires when the node is created)."""
    return _read_versioned(zk, path, watch)[0]


def _read_versioned(zk: KazooClient, path: str, watch: Watcher | None) -> tuple[bytes | None, int]:
    """_read, and the version of the node read (-1: no such node)."""
    while True:
        try:
            data, stat = zk.get(path, watch=watch)
            return data, stat.version
        except NoNodeError:
            if watch is None or zk.exists(path, watch=watch) is None:
                return None, -1
            # Created between the two calls: read it (and watch it) again.


def _read_all(
    zk: KazooClient, paths: Iterable[str], watch: Watcher | None
) -> dict[str, tuple[bytes | None, int]]:
    """_read_versioned of many nodes, the reads sent at once: one round trip for all of them
    (and one more for the watches of those missing), not one each. A round trip is a hop to
    kazoo's thread and back, which a busy process (a broker starting, its admin API's import
    beside it) makes several milliseconds long."""
    pending = [(path, zk.get_async(path, watch=watch)) for path in paths]
    found: dict[str, tuple[bytes | None, int]] = {}
    for path, result in pending:
        try:
            data, stat = result.get()
            found[path] = (data, stat.version)
        except NoNodeError:
            found[path] = (None, -1)
    if watch is not None:  # a missing node's watch is an exists', which fires once it is made
        missing = [
            (path, zk.exists_async(path, watch=watch))
            for path, (data, version) in found.items()
            if version == -1
        ]
        for path, result in missing:
            if result.get() is not None:  # made between the two calls: read (watched) again
                found[path] = _read_versioned(zk, path, watch)
    return found


def connect(
    hosts: str,
    timeout: float = 15.0,
    session_timeout: float = 6.0,
    *,
    wait_for_server: bool = False,
) -> KazooClient:
    """A started client; ``timeout`` is how long to wait for the first connection
    (zookeeper.connection.timeout.ms), ``session_timeout`` the session's. Unreachable if no
    server starts a session in ``timeout``, or at once if every server refuses connections,
    unless ``wait_for_server`` (a broker, whose ZooKeeper may be starting beside it): then a
    refusing server is tried again until ``timeout``, as kazoo does."""
    if not wait_for_server:
        servers = hosts.split("/", 1)[0].split(",")
        refusals = [refusal(server, min(timeout, 5.0), 2181) for server in servers]
        if all(refusals):
            reasons = dict.fromkeys(reason for reason in refusals if reason)
            raise Unreachable("ZooKeeper", hosts, "; ".join(reasons))
    client = KazooClient(hosts=hosts, timeout=session_timeout)
    try:
        client.start(timeout=timeout)
    except client.handler.timeout_exception:
        raise Unreachable("ZooKeeper", hosts, f"no session in {timeout:g} s") from None
    return client


@contextlib.contextmanager
def session(hosts: str) -> Iterator[KazooClient]:
    """A client connected for the length of a ``with`` block."""
    client = connect(hosts)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def ensure_layout(zk: KazooClient) -> str:
    """Creates the persistent paths and the cluster id if missing; returns the cluster id."""
    for path in (BROKER_IDS, TOPICS, TOPIC_CONFIGS, DELETE_TOPICS):
        zk.ensure_path(path)
    try:
        cluster_id = uuid.uuid4().hex[:22]
        zk.create(CLUSTER_ID, _dump({"version": "1", "id": cluster_id}), makepath=True)
    except NodeExistsError:
        pass
    return _json(zk.get(CLUSTER_ID)[0])["id"]


def register_broker(
    zk: KazooClient,
    broker: BrokerEndpoint,
    wait: float = 30.0,
    *,
    remote_log_storage: bool = False,
) -> None:
    """Creates the broker's ephemeral znode, as Kafka 0.10.2 writes it (version 4: every
    advertised listener in ``endpoints``, ``host``/``port`` the inter-broker one). If a previous
    session of this broker (one that was killed) still holds it, waits up to ``wait`` seconds
    for ZooKeeper to expire that session, as Kafka does; a broker id held by a live broker is
    an error."""
    listeners = broker.listeners or (("PLAINTEXT", broker.host, broker.port),)
    document = {
        "listener_security_protocol_map": {name: "PLAINTEXT" for name, _, _ in listeners},
        "endpoints": [f"{name}://{host}:{port}" for name, host, port in listeners],
        "jmx_port": -1,
        "host": broker.host,
        "port": broker.port,
        "rack": broker.rack,
        "tidelog_admin": broker.admin,
        # remote.log.storage.system.enable, so that topic creation can refuse remote storage
        # on a cluster without the tier
        "tidelog_remote_log_storage": remote_log_storage,
        "timestamp": str(int(time.time() * 1000)),
        "version": 4,
    }
    broker_id = broker.broker_id
    path = f"{BROKER_IDS}/{broker_id}"
    deadline = time.monotonic() + wait
    while True:
        try:
            zk.create(path, _dump(document), ephemeral=True, makepath=True)
            return
        except NodeExistsError:
            # This session's own node (a second registration racing the first, say one a
            # reconnection started while the first was still on its way): registered already,
            # as Kafka's checked ephemeral create concludes.
            try:
                _, stat = zk.get(path)
            except NoNodeError:
                continue  # expired between the two calls: create it now
            if stat.ephemeralOwner == zk.client_id[0]:
                zk.set(path, _dump(document))
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"broker.id {broker_id} is registered in ZooKeeper by another live broker"
                ) from None
            log.info(
                "broker id %d is still registered by an earlier session; waiting for "
                "ZooKeeper to expire it",
                broker_id,
            )
            time.sleep(1.0)


def read_brokers(zk: KazooClient, watch: Watcher | None = None) -> dict[int, BrokerEndpoint]:
    try:
        children = zk.get_children(BROKER_IDS, watch=watch)
    except NoNodeError:
        return {}  # no broker has ever started against this ZooKeeper
    return _brokers_from(zk, children)


def _brokers_from(zk: KazooClient, children: list[str]) -> dict[int, BrokerEndpoint]:
    """The brokers registered as ``children`` of /brokers/ids, their nodes read at once."""
    brokers: dict[int, BrokerEndpoint] = {}
    nodes = _read_all(zk, [f"{BROKER_IDS}/{child}" for child in children], None)
    for child in children:
        data = nodes[f"{BROKER_IDS}/{child}"][0]
        if data is None:
            continue  # it went away while we looked
        document = _json(data)
        brokers[int(child)] = BrokerEndpoint(
            int(child),
            document["host"],
            int(document["port"]),
            document.get("rack"),
            document.get("tidelog_admin"),
            tuple(_endpoint(endpoint) for endpoint in document.get("endpoints", ())),
        )
    return brokers


def _endpoint(text: str) -> tuple[str, str, int]:
    name, _, address = text.partition("://")
    host, _, port = address.rpartition(":")
    return name, host, int(port)


def brokers_without_remote_storage(zk: KazooClient) -> list[int]:
    """The live brokers registered without remote.log.storage.system.enable."""
    without = []
    for child in zk.get_children(BROKER_IDS) if zk.exists(BROKER_IDS) else []:
        try:
            document = _json(zk.get(f"{BROKER_IDS}/{child}")[0])
        except NoNodeError:
            continue
        if not document.get("tidelog_remote_log_storage", False):
            without.append(int(child))
    return sorted(without)


def read_topic(zk: KazooClient, topic: str, watch: Watcher | None = None) -> TopicMetadata | None:
    return read_topics(zk, [topic], watch).get(topic)


def read_topics(
    zk: KazooClient, topics: Iterable[str], watch: Watcher | None = None
) -> dict[str, TopicMetadata]:
    """The metadata of each of ``topics`` that exists, in two rounds of reads sent at once
    (the topics' nodes, then their configs and partitions' states), whatever their number: a
    thousand partitions read one by one took a broker seconds, and a hundred topics read one
    after another hundreds of round trips."""
    nodes = _read_all(zk, [topic_path(name) for name in topics], watch)
    assignments = {}
    for path, (data, _) in nodes.items():
        if data is not None:  # a topic gone is left out, and nothing more of it is watched
            document = _json(data)
            assignments[path[len(TOPICS) + 1 :]] = {
                int(p): tuple(replicas) for p, replicas in document["partitions"].items()
            }
    # the topics' configs and their partitions' states, in one round
    details = _read_all(
        zk,
        [f"{TOPIC_CONFIGS}/{name}" for name in assignments]
        + [state_path(name, p) for name, assignment in assignments.items() for p in assignment],
        watch,
    )
    found = {}
    for name, assignment in assignments.items():
        topic_states = {}
        for partition in assignment:
            data, version = details[state_path(name, partition)]
            if data is not None:
                topic_states[partition] = _state_from(_json(data), version)
        overrides = _overrides(details[f"{TOPIC_CONFIGS}/{name}"][0])
        found[name] = TopicMetadata(name, assignment, topic_states, overrides)
    return found


def _state_from(document: dict, zk_version: int = -1) -> PartitionState:
    return PartitionState(
        document["leader"],
        document["leader_epoch"],
        tuple(document["isr"]),
        document.get("controller_epoch", 0),
        zk_version,
    )


def read_partition_state(
    zk: KazooClient, topic: str, partition: int, watch: Watcher | None = None
) -> PartitionState | None:
    data, version = _read_versioned(zk, state_path(topic, partition), watch)
    if data is None:
        return None
    return _state_from(_json(data), version)


def read_topic_config(zk: KazooClient, topic: str, watch: Watcher | None = None) -> dict[str, str]:
    return read_topic_configs(zk, {topic}, watch)[topic]


def read_topic_configs(
    zk: KazooClient, names: set[str], watch: Watcher | None = None
) -> dict[str, dict[str, str]]:
    """The overrides of each of the topics ``names`` ({} for one with none, or gone), the
    reads sent at once."""
    nodes = _read_all(zk, [f"{TOPIC_CONFIGS}/{name}" for name in sorted(names)], watch)
    return {name: _overrides(nodes[f"{TOPIC_CONFIGS}/{name}"][0]) for name in sorted(names)}


def _overrides(config_node: bytes | None) -> dict[str, str]:
    return dict(_json(config_node).get("config", {})) if config_node else {}


def read_controller(zk: KazooClient, watch: Watcher | None = None) -> int:
    data = _read(zk, CONTROLLER, watch)
    return int(_json(data)["brokerid"]) if data else -1


def read_cluster(zk: KazooClient, watch: Watcher | None = None) -> MetadataCache:
    """Everything a broker's metadata cache holds, with ``watch`` set on every node read. The
    reads go out a round at a time, each round's at once (the lists and the single nodes, the
    brokers' nodes, the topics' nodes, their configs and partitions' states, and a round for the
    watches of nodes not there): a handful of round trips whatever the cluster's size, where
    reading topic by topic took three a topic."""
    lists = {
        path: zk.get_children_async(path, watch=watch)
        for path in (BROKER_IDS, TOPICS, DELETE_TOPICS)
    }
    cluster_id = zk.get_async(CLUSTER_ID)
    # the controller's node, and the two whose creation wakes the controller
    singles = _read_all(zk, [CONTROLLER, PREFERRED_REPLICA_ELECTION, REASSIGN_PARTITIONS], watch)
    children: dict[str, list[str]] = {}
    for path, result in lists.items():
        try:
            children[path] = result.get()
        except NoNodeError:
            if path == TOPICS:  # made by every broker's start: its absence is an error
                raise
            children[path] = []  # no broker registered, or no deletion asked for, yet
    cache = MetadataCache(brokers=_brokers_from(zk, children[BROKER_IDS]))
    cache.topics = read_topics(zk, children[TOPICS], watch)
    controller = singles[CONTROLLER][0]
    cache.controller_id = int(_json(controller)["brokerid"]) if controller else -1
    cache.deleting = set(children[DELETE_TOPICS])
    try:
        data = cluster_id.get()[0]
    except NoNodeError:
        data = None
    cache.cluster_id = _json(data)["id"] if data else None
    return cache


def read_changes(
    zk: KazooClient, paths: set[str], known_topics: set[str], watch: Watcher
) -> MetadataDelta:
    """Reads again only the nodes in ``paths`` (those whose watches fired), setting their
    watches again; ``known_topics`` are the topics the cache already read from ZooKeeper. A
    changed partition state costs one read, not a read of every partition in the cluster:
    with thousands of partitions, each ISR change made every broker read them all."""
    delta = MetadataDelta()
    topic_nodes: set[str] = set()
    states: list[tuple[str, int]] = []
    for path in paths:
        if path == BROKER_IDS or path.startswith(BROKER_IDS + "/"):
            delta.brokers = {}
        elif path == TOPICS:
            children = set(zk.get_children(TOPICS, watch=watch))
            topic_nodes.update(children - known_topics)
            delta.removed.update(known_topics - children)
        elif path.startswith(TOPICS + "/"):
            parts = path[len(TOPICS) + 1 :].split("/")
            if len(parts) == 1:
                topic_nodes.add(parts[0])
            elif len(parts) == 4 and parts[1] == "partitions" and parts[3] == "state":
                states.append((parts[0], int(parts[2])))
        elif path.startswith(TOPIC_CONFIGS + "/"):
            name = path[len(TOPIC_CONFIGS) + 1 :]
            delta.configs[name] = read_topic_config(zk, name, watch)
        elif path == CONTROLLER:
            delta.controller_id = read_controller(zk, watch)
        elif path == DELETE_TOPICS:
            with contextlib.suppress(NoNodeError):
                delta.deleting = set(zk.get_children(DELETE_TOPICS, watch=watch))
        elif path in (PREFERRED_REPLICA_ELECTION, REASSIGN_PARTITIONS):
            _read(zk, path, watch)  # watched again for the controller
    if delta.brokers is not None:
        delta.brokers = read_brokers(zk, watch)
    found = read_topics(zk, topic_nodes, watch)
    for name in topic_nodes:
        if name in found:
            delta.topics[name] = found[name]
            delta.removed.discard(name)
        else:
            delta.removed.add(name)
    wanted = [key for key in states if key[0] not in delta.topics]
    nodes = _read_all(zk, [state_path(*key) for key in wanted], watch)
    for key in wanted:
        data, version = nodes[state_path(*key)]
        delta.states[key] = _state_from(_json(data), version) if data is not None else None
    return delta


def write_topic_config(zk: KazooClient, topic: str, config: dict[str, str]) -> None:
    data = _dump({"version": 1, "config": config})
    path = f"{TOPIC_CONFIGS}/{topic}"
    if zk.exists(path):
        zk.set(path, data)
    else:
        zk.create(path, data, makepath=True)


def create_topic_nodes(
    zk: KazooClient,
    topic: str,
    assignment: dict[int, list[int]],
    config: dict[str, str],
) -> None:
    """Writes a new topic: its config, its assignment, and each partition's first state
    (leader: the first replica, every replica in sync). Raises NodeExistsError if it exists."""
    write_topic_config(zk, topic, config)
    # One transaction per CREATE_BATCH partitions instead of a round trip per node; the first
    # holds the topic itself, so that brokers and the controller, which watch the topics, see
    # it with its first partitions' states (and all of them below CREATE_BATCH partitions).
    document = {"version": 1, "partitions": {str(p): r for p, r in sorted(assignment.items())}}
    partitions = sorted(assignment.items())
    for start in range(0, max(len(partitions), 1), CREATE_BATCH):
        transaction = zk.transaction()
        if start == 0:
            transaction.create(topic_path(topic), _dump(document))
            transaction.create(f"{topic_path(topic)}/partitions", b"")
        for partition, replicas in partitions[start : start + CREATE_BATCH]:
            transaction.create(f"{topic_path(topic)}/partitions/{partition}", b"")
            transaction.create(state_path(topic, partition), _first_state(replicas))
        failures = [r for r in transaction.commit() if isinstance(r, Exception)]
        if failures:
            cause = next((f for f in failures if not isinstance(f, RolledBackError)), failures[0])
            raise cause


def _first_state(replicas: list[int]) -> bytes:
    """A new partition's state: its first replica leads, every replica in sync."""
    return _dump(
        {
            "controller_epoch": 0,
            "leader": replicas[0],
            "version": 1,
            "leader_epoch": 0,
            "isr": list(replicas),
        }
    )


def add_partition_nodes(
    zk: KazooClient, topic: str, new: dict[int, list[int]], version: int
) -> None:
    """Adds partitions to a topic in one transaction: its assignment rewritten (a
    compare-and-set on ``version``: BadVersionError if it changed meanwhile) and each new
    partition's first state."""
    data = zk.get(topic_path(topic))[0]
    document = _json(data)
    document["partitions"] = {
        **document["partitions"],
        **{str(p): list(r) for p, r in sorted(new.items())},
    }
    transaction = zk.transaction()
    transaction.set_data(topic_path(topic), _dump(document), version=version)
    for partition, replicas in sorted(new.items()):
        transaction.create(f"{topic_path(topic)}/partitions/{partition}", b"")
        transaction.create(state_path(topic, partition), _first_state(replicas))
    failures = [r for r in transaction.commit() if isinstance(r, Exception)]
    if failures:
        cause = next((f for f in failures if not isinstance(f, RolledBackError)), failures[0])
        raise cause


def read_state_and_version(
    zk: KazooClient, topic: str, partition: int
) -> tuple[PartitionState, int] | None:
    try:
        data, stat = zk.get(state_path(topic, partition))
    except NoNodeError:
        return None
    return _state_from(_json(data), stat.version), stat.version


def read_states_and_versions(
    zk: KazooClient, topic: str, partitions: list[int]
) -> dict[int, tuple[PartitionState, int]]:
    """read_state_and_version of many partitions, the reads sent at once; a partition without
    a state is left out."""
    pending = [(p, zk.get_async(state_path(topic, p))) for p in partitions]
    states = {}
    for partition, result in pending:
        try:
            data, stat = result.get()
        except NoNodeError:
            continue
        states[partition] = (_state_from(_json(data), stat.version), stat.version)
    return states


def _state_document(state: PartitionState) -> bytes:
    return _dump(
        {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": 1,
            "leader_epoch": state.leader_epoch,
            "isr": sorted(state.isr),
        }
    )


def write_state(
    zk: KazooClient, topic: str, partition: int, state: PartitionState, version: int
) -> bool:
    """Compare-and-set of a partition state: False if someone wrote it since ``version``."""
    try:
        zk.set(state_path(topic, partition), _state_document(state), version=version)
        return True
    except (BadVersionError, NoNodeError):
        return False


def write_states(zk: KazooClient, writes: list[tuple[str, int, PartitionState, int]]) -> list[bool]:
    """write_state of many partitions (topic, partition, state, version), the writes sent at
    once and then awaited; whether each was written. ConnectionLoss if a reply was lost."""
    outcomes = _write_outcomes(zk, writes)
    if None in outcomes:
        raise ConnectionLoss(f"{outcomes.count(None)} partition state writes not answered")
    return [bool(outcome) for outcome in outcomes]


def _write_outcomes(
    zk: KazooClient, writes: list[tuple[str, int, PartitionState, int]]
) -> list[bool | None]:
    """The writes sent at once, then awaited: True written, False refused (a newer version, or
    no node), None where the connection was lost after it went out (it may have been
    applied)."""
    pending = [
        zk.set_async(state_path(topic, number), _state_document(state), version=version)
        for topic, number, state, version in writes
    ]
    outcomes: list[bool | None] = []
    for result in pending:
        try:
            result.get()
            outcomes.append(True)
        except (BadVersionError, NoNodeError):
            outcomes.append(False)
        except (ConnectionLoss, SessionExpiredError):
            outcomes.append(None)
    return outcomes


def update_isrs(
    zk: KazooClient, leader: int, changes: list[tuple[str, int, int, frozenset[int]]]
) -> list[bool | None]:
    """Leaders' ISR changes (topic, partition, leader epoch, ISR), each written only while the
    state still names ``leader`` leader in that epoch: the states read at once, then the
    writes sent at once; whether each was written: True, False, or None where the connection
    was lost after the write went out (it may have been applied). A connection lost while
    reading raises: nothing was written."""
    by_topic: dict[str, list[int]] = {}
    for topic, number, _, _ in changes:
        by_topic.setdefault(topic, []).append(number)
    current = {
        (topic, number): found
        for topic, numbers in by_topic.items()
        for number, found in read_states_and_versions(zk, topic, numbers).items()
    }
    writes = []
    for topic, number, leader_epoch, isr in changes:
        found = current.get((topic, number))
        if found is None:
            continue
        state, version = found
        if state.leader != leader or state.leader_epoch != leader_epoch:
            continue
        changed = PartitionState(
            leader, leader_epoch, tuple(sorted(isr)), state.controller_epoch, version + 1
        )
        writes.append((topic, number, changed, version))
    outcomes = {
        (topic, number): outcome
        for (topic, number, _, _), outcome in zip(writes, _write_outcomes(zk, writes), strict=True)
    }
    return [outcomes.get((topic, number), False) for topic, number, _, _ in changes]


def reorder_replicas(zk: KazooClient, topic: str, assignment: dict[int, list[int]]) -> None:
    """Writes a new order of each partition's replicas (the first is the preferred leader):
    a reassignment that moves no data, so the replica sets must stay as they are (ValueError
    naming the partition otherwise). Compare-and-set on the topic's node; safe to repeat."""
    data, stat = zk.get(topic_path(topic))
    document = _json(data)
    current = {int(p): replicas for p, replicas in document["partitions"].items()}
    for partition, replicas in assignment.items():
        if sorted(current.get(partition, [])) != sorted(replicas):
            raise ValueError(
                f"{topic}-{partition}: replicas {current.get(partition)} cannot be reordered "
                f"into {replicas}: a reorder keeps the same replicas"
            )
    document["partitions"] = {
        str(p): list(assignment.get(p, replicas)) for p, replicas in sorted(current.items())
    }
    zk.set(topic_path(topic), _dump(document), version=stat.version)


def request_preferred_leader_election(zk: KazooClient, partitions: list[tuple[str, int]]) -> None:
    """Asks the controller to move leadership back to each partition's first replica."""
    document = {
        "version": 1,
        "partitions": [{"topic": t, "partition": p} for t, p in sorted(partitions)],
    }
    try:
        zk.create(PREFERRED_REPLICA_ELECTION, _dump(document), makepath=True)
    except NodeExistsError:
        raise RuntimeError("a preferred leader election is already in progress") from None


def take_preferred_leader_election(zk: KazooClient) -> list[tuple[str, int]] | None:
    """The partitions of a pending preferred leader election (the request is consumed)."""
    data = _read(zk, PREFERRED_REPLICA_ELECTION, None)
    if data is None:
        return None
    zk.delete(PREFERRED_REPLICA_ELECTION)
    return [(p["topic"], int(p["partition"])) for p in _json(data).get("partitions", [])]


def consumer_offset_path(group: str, topic: str, partition: int) -> str:
    return f"/consumers/{group}/offsets/{topic}/{partition}"


def write_consumer_offset(
    zk: KazooClient, group: str, topic: str, partition: int, offset: int
) -> None:
    """An OffsetCommit v0: the offset as a decimal string, where 0.8/0.9 consumers keep it."""
    path = consumer_offset_path(group, topic, partition)
    data = str(offset).encode()
    try:
        zk.set(path, data)
    except NoNodeError:
        try:
            zk.create(path, data, makepath=True)
        except NodeExistsError:
            zk.set(path, data)


def read_consumer_offset(zk: KazooClient, group: str, topic: str, partition: int) -> int | None:
    try:
        data = zk.get(consumer_offset_path(group, topic, partition))[0]
    except NoNodeError:
        return None
    try:
        return int(data.decode())
    except ValueError:
        return None


def request_topic_deletion(zk: KazooClient, topic: str) -> None:
    if not zk.exists(topic_path(topic)):
        raise KeyError(topic)
    with contextlib.suppress(NodeExistsError):  # already asked for
        zk.create(f"{DELETE_TOPICS}/{topic}", makepath=True)


def pending_topic_deletions(zk: KazooClient) -> list[str]:
    try:
        return sorted(zk.get_children(DELETE_TOPICS))
    except NoNodeError:
        return []


def delete_topic_nodes(zk: KazooClient, topic: str) -> None:
    """Removes a topic from ZooKeeper: its assignment and states, its config, the request."""
    for path in (topic_path(topic), f"{TOPIC_CONFIGS}/{topic}", f"{DELETE_TOPICS}/{topic}"):
        with contextlib.suppress(NoNodeError):
            zk.delete(path, recursive=True)


def reassignment_document(assignment: dict[tuple[str, int], list[int]]) -> dict:
    """Kafka's reassignment JSON: {"version":1,"partitions":[{"topic","partition","replicas"}]}."""
    return {
        "version": 1,
        "partitions": [
            {"topic": t, "partition": p, "replicas": list(r)}
            for (t, p), r in sorted(assignment.items())
        ],
    }


def read_reassignment(zk: KazooClient) -> dict[tuple[str, int], list[int]]:
    """The partitions being reassigned (/admin/reassign_partitions) and their new replicas."""
    data = _read(zk, REASSIGN_PARTITIONS, None)
    if not data:
        return {}
    return {
        (entry["topic"], int(entry["partition"])): [int(r) for r in entry["replicas"]]
        for entry in _json(data).get("partitions", [])
    }


def request_reassignment(zk: KazooClient, assignment: dict[tuple[str, int], list[int]]) -> None:
    """Writes /admin/reassign_partitions; RuntimeError if a reassignment is under way (as
    Kafka, one at a time: a partition is never moved twice at once)."""
    for _ in range(3):
        try:
            zk.create(REASSIGN_PARTITIONS, _dump(reassignment_document(assignment)), makepath=True)
            return
        except NodeExistsError:
            refuse_while_reassigning(zk)  # or it finished meanwhile: try again
    raise RuntimeError(f"{REASSIGN_PARTITIONS} keeps changing under this request: try again")


def refuse_while_reassigning(zk: KazooClient) -> None:
    """RuntimeError naming the partitions of the reassignment under way, if there is one."""
    running = ", ".join(f"{t}-{p}" for t, p in sorted(read_reassignment(zk)))
    if running:
        raise RuntimeError(
            f"a partition reassignment is under way ({running}): one at a time; "
            "`tidelog topic reassign --verify` tells when it is done"
        )


def finish_reassignments(zk: KazooClient, finished: set[tuple[str, int]]) -> None:
    """Takes ``finished`` partitions out of /admin/reassign_partitions (the znode goes with
    the last), with a compare-and-set so that nothing written meanwhile is lost."""
    while True:
        try:
            data, stat = zk.get(REASSIGN_PARTITIONS)
        except NoNodeError:
            return
        document = _json(data)
        left = [
            entry
            for entry in document.get("partitions", [])
            if (entry["topic"], int(entry["partition"])) not in finished
        ]
        try:
            if left:
                zk.set(REASSIGN_PARTITIONS, _dump({**document, "partitions": left}), stat.version)
            else:
                zk.delete(REASSIGN_PARTITIONS, version=stat.version)
            return
        except (BadVersionError, NoNodeError):
            continue


def read_assignment_and_version(
    zk: KazooClient, topic: str
) -> tuple[dict[int, list[int]], int] | None:
    try:
        data, stat = zk.get(topic_path(topic))
    except NoNodeError:
        return None
    partitions = _json(data)["partitions"]
    return {int(p): list(r) for p, r in partitions.items()}, stat.version


def write_assignment_and_states(
    zk: KazooClient,
    topic: str,
    changed: dict[int, list[int]],
    version: int,
    states: list[tuple[int, PartitionState, int]],
) -> bool:
    """Changes some partitions' replicas and their states in one transaction, each a
    compare-and-set (the topic's node on ``version``, each state on its own); False, and
    nothing written, if any of them changed meanwhile."""
    data = zk.get(topic_path(topic))[0]
    document = _json(data)
    document["partitions"] = {
        **document["partitions"],
        **{str(p): list(r) for p, r in changed.items()},
    }
    transaction = zk.transaction()
    transaction.set_data(topic_path(topic), _dump(document), version=version)
    for partition, state, state_version in states:
        transaction.set_data(
            state_path(topic, partition), _state_document(state), version=state_version
        )
    return not any(isinstance(r, Exception) for r in transaction.commit())


def broker_config_path(broker_id: int) -> str:
    return f"{BROKER_CONFIGS}/{broker_id}"


def parse_entity_config(data: bytes | None) -> dict[str, str]:
    """The "config" of a /config/{topics,brokers}/{name} document ({} if none)."""
    return dict(_json(data).get("config", {})) if data else {}


def change_broker_config(zk: KazooClient, broker_id: int, changes: dict[str, str | None]) -> bool:
    """Sets (None: removes) keys of Kafka's dynamic broker config /config/brokers/{id};
    whether anything changed."""
    path = broker_config_path(broker_id)
    data = _read(zk, path, None)
    config = parse_entity_config(data)
    updated = {**config, **{k: v for k, v in changes.items() if v is not None}}
    for key, value in changes.items():
        if value is None:
            updated.pop(key, None)
    if updated == config:
        return False
    document = _dump({"version": 1, "config": updated})
    if data is None:
        zk.create(path, document, makepath=True)
    else:
        zk.set(path, document)
    return True


# -- producer ids (KIP-98) -------------------------------------------------------------------------


def claim_producer_id_block(
    zk: KazooClient, broker_id: int, size: int = PRODUCER_ID_BLOCK_SIZE
) -> tuple[int, int]:
    """Takes the next ``size`` producer ids for ``broker_id``: (first, last), both included.

    As Kafka's ProducerIdManager: the block after the one in /latest_producer_id_block
    (0..size-1 if there is none), written back only if the node is still at the version read,
    so two brokers never take the same block; a lost race reads again. Ids are never reused
    across the cluster's life (a block is taken, used or not)."""
    while True:
        try:
            data, stat = zk.get(LATEST_PRODUCER_ID_BLOCK)
        except NoNodeError:
            data, stat = b"", None
        if data:
            document = _json(data)
            start = int(document["block_end"]) + 1
        else:
            start = 0
        end = start + size - 1
        if end > LONG_MAX - size:
            raise RuntimeError(f"producer ids exhausted: the last block ended at {start - 1}")
        block = _dump(
            {"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)}
        )
        try:
            if stat is None:
                zk.create(LATEST_PRODUCER_ID_BLOCK, block, makepath=True)
            else:
                zk.set(LATEST_PRODUCER_ID_BLOCK, block, version=stat.version)
        except (NodeExistsError, BadVersionError):
            continue  # another broker took a block meanwhile: the next one is ours
        log.info("broker %d took producer ids %d to %d", broker_id, start, end)
        return start, end
