"""Incremental fetch sessions between brokers, in the spirit of KIP-227 (leader side).

A follower's first fetch names every partition it follows from this leader (session id 0); the
leader remembers them in a session and answers with its id. Later fetches name only partitions
whose fetch offset changed and the ones the follower stopped following ("forgotten"); the
leader answers only partitions with something to say: new data, a changed high watermark or an
error. Clients never see this: it is the REPLICA_FETCH API, served to other brokers only.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field

from tidelog.errors import ErrorCode, KafkaError

TopicPartition = tuple[str, int]
# a session id of 0 asks for a new session; the session epoch of a follower's first fetch
NEW_SESSION_ID = 0
FIRST_EPOCH = 0


@dataclass(eq=False)  # sessions are kept in sets by identity
class FetchSession:
    """One follower's partitions on this leader.

    ``partitions`` maps each partition to the fetch offset and max bytes the follower last
    named, ``sent_high_watermarks`` the high watermark last answered for it. ``changed`` holds
    the partitions that may have something to send: an append or a high watermark move here
    since they were last answered, or a fetch that named them. A partition leaves ``changed``
    once an answer holds everything it had (no data beyond what was sent); it is ordered
    (a dict used as an ordered set): a partition answered with data goes to the back, so that
    when an answer fills up, the partitions left out are read first next time. ``epoch`` is the
    epoch the next fetch must carry (the full fetch that opened the session counts as epoch 0);
    each answered fetch adds one.
    """

    session_id: int
    replica_id: int
    partitions: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    changed: dict[TopicPartition, None] = field(default_factory=dict)
    sent_high_watermarks: dict[TopicPartition, int] = field(default_factory=dict)
    epoch: int = 0
    event: asyncio.Event = field(default_factory=asyncio.Event)

    def mark_changed(self, key: TopicPartition) -> None:
        if key in self.partitions:
            self.changed[key] = None
            self.event.set()


class FetchSessionCache:
    """The sessions this leader holds, at most ``max_sessions``
    (max.incremental.fetch.session.cache.slots), one per follower.

    A follower's new session replaces its older one; when the cache is full, the session used
    least recently is evicted, and its follower's next incremental fetch gets
    FETCH_SESSION_ID_NOT_FOUND, after which it starts over with a full fetch. ``by_partition``
    finds the sessions to mark when a partition changes, so an append costs one lookup, not a
    walk over every session's partitions.
    """

    def __init__(self, max_sessions: int) -> None:
        if max_sessions < 1:
            raise ValueError(f"a fetch session cache needs a slot, not {max_sessions}")
        self.max_sessions = max_sessions
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self.by_partition: dict[TopicPartition, set[FetchSession]] = {}
        self.evictions = 0
        self._ids = itertools.count(1)

    def describe(self) -> dict:
        """For the admin API: each session's follower and partition count, and evictions."""
        return {
            "evictions": self.evictions,
            "sessions": [
                {
                    "session_id": s.session_id,
                    "replica_id": s.replica_id,
                    "epoch": s.epoch,
                    "partitions": len(s.partitions),
                }
                for s in self.sessions.values()
            ],
        }

    def mark_changed(self, key: TopicPartition) -> None:
        """An append, a high-watermark move or a leadership change of ``key``."""
        for session in self.by_partition.get(key, ()):
            session.mark_changed(key)

    def resend(self, key: TopicPartition) -> None:
        """The next answer of each session holding ``key`` carries it even with no new data or
        high watermark: its log start moved (a DeleteRecords), which followers must hear."""
        for session in self.by_partition.get(key, ()):
            session.sent_high_watermarks.pop(key, None)
            session.mark_changed(key)

    def open(
        self, replica_id: int, partitions: dict[TopicPartition, tuple[int, int]]
    ) -> FetchSession:
        """A new session for a follower's full fetch, replacing its older one."""
        for old in [s for s in self.sessions.values() if s.replica_id == replica_id]:
            self._drop(old)
        while len(self.sessions) >= self.max_sessions:
            _, oldest = next(iter(self.sessions.items()))
            self._drop(oldest)
            self.evictions += 1
        session = FetchSession(next(self._ids), replica_id)
        self.sessions[session.session_id] = session
        self.update(session, partitions, [])
        return session

    def get(self, session_id: int, epoch: int, replica_id: int) -> FetchSession:
        """The session an incremental fetch names; raises FETCH_SESSION_ID_NOT_FOUND (evicted,
        or this leader restarted) or INVALID_FETCH_SESSION_EPOCH (a fetch lost on the way)."""
        session = self.sessions.get(session_id)
        if session is None or session.replica_id != replica_id:
            raise KafkaError(
                ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                f"no fetch session {session_id} for replica {replica_id}",
            )
        if epoch != session.epoch:
            self._drop(session)
            raise KafkaError(
                ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                f"fetch session {session_id} of replica {replica_id}: epoch {epoch}, "
                f"expected {session.epoch}",
            )
        self.sessions.move_to_end(session_id)
        return session

    def update(
        self,
        session: FetchSession,
        named: dict[TopicPartition, tuple[int, int]],
        forgotten: list[TopicPartition],
    ) -> None:
        """Applies a fetch to its session: named partitions are (re)set and marked changed;
        forgotten ones leave it."""
        for key in forgotten:
            if session.partitions.pop(key, None) is not None:
                session.changed.pop(key, None)
                session.sent_high_watermarks.pop(key, None)
                sessions = self.by_partition.get(key)
                if sessions is not None:
                    sessions.discard(session)
                    if not sessions:
                        del self.by_partition[key]
        for key, position in named.items():
            session.partitions[key] = position
            session.changed[key] = None
            self.by_partition.setdefault(key, set()).add(session)

    def _drop(self, session: FetchSession) -> None:
        self.sessions.pop(session.session_id, None)
        for key in session.partitions:
            sessions = self.by_partition.get(key)
            if sessions is not None:
                sessions.discard(session)
                if not sessions:
                    del self.by_partition[key]
        session.event.set()  # a fetch waiting on it answers at once
