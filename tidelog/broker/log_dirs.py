"""DescribeLogDirs v0-v1 on the wire: this broker's log directories, and the size of each
partition it holds in them, as Kafka 2.1's ReplicaManager.describeLogDirs answers.

Every directory in log.dirs is listed (tidelog halts rather than take a directory offline, so
each is answered without error). A partition's offset lag is its high watermark less its log
end offset, never below 0, as Kafka's for a replica that is not a future one; tidelog moves no
replica between directories, so none is a future replica.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tidelog.log.manager import LogManager
from tidelog.protocol.frames import Request
from tidelog.protocol.schemas import ApiKey


class LogDirRequests:
    """The handler of DescribeLogDirs, for RequestHandler.register."""

    def __init__(self, logs: LogManager) -> None:
        self.logs = logs

    def handlers(self) -> dict[ApiKey, Callable[[Request], Awaitable[dict | None]]]:
        return {ApiKey.DESCRIBE_LOG_DIRS: self.describe_log_dirs}

    async def describe_log_dirs(self, request: Request) -> dict:
        asked = request.body["topics"]
        wanted = (
            None if asked is None else {(t["topic"], p) for t in asked for p in t["partitions"]}
        )
        by_dir: dict[str, dict[str, list[dict[str, Any]]]] = {
            str(directory.absolute()): {} for directory in self.logs.log_dirs
        }
        for (topic, partition), held in sorted(self.logs.logs.items()):
            if wanted is not None and (topic, partition) not in wanted:
                continue
            directory = str(held.directory.parent.absolute())
            by_dir.setdefault(directory, {}).setdefault(topic, []).append(
                {
                    "partition": partition,
                    "size": held.size_in_bytes,
                    "offset_lag": max(held.high_watermark - held.log_end_offset, 0),
                    "is_future": False,
                }
            )
        return {
            "throttle_time_ms": 0,
            "log_dirs": [
                {
                    "error_code": 0,
                    "log_dir": directory,
                    "topics": [
                        {"topic": topic, "partitions": partitions}
                        for topic, partitions in topics.items()
                    ],
                }
                for directory, topics in by_dir.items()
            ],
        }
