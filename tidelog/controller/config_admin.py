"""DescribeConfigs v0-v2 and AlterConfigs v0-v1 on the wire, answered by any broker.

A topic's settings are its overrides in ZooKeeper (``/config/topics/<topic>``, what
``tidelog topic alter-config`` writes) over the broker's topic defaults; a broker's are the
settings it started with. AlterConfigs of a topic replaces the whole set of its overrides, as
Kafka 2.1's does (the non-incremental API): an unknown key is INVALID_CONFIG naming it, a bad
value INVALID_REQUEST naming the key and the values allowed (Kafka's ConfigException), and
``validate_only`` checks without writing. A broker's settings are static in tidelog (read at
start-up; Kafka 2.1's dynamic broker configs are not served): altering one is INVALID_REQUEST
naming the keys, as Kafka answers a key it cannot update dynamically.

Each resource gets its own error code and message; an unknown resource type is INVALID_REQUEST.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kazoo.client import KazooClient

from tidelog.config import (
    BROKER_KEYS,
    TOPIC_KEYS,
    TOPIC_TO_BROKER_KEY,
    ConfigError,
    config_text,
    unknown_key_message,
)
from tidelog.controller import topics, zookeeper
from tidelog.errors import ErrorCode, KafkaError
from tidelog.protocol.frames import Request
from tidelog.protocol.schemas import (
    CONFIG_SOURCE_DEFAULT,
    CONFIG_SOURCE_STATIC_BROKER,
    CONFIG_SOURCE_TOPIC,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    ApiKey,
)

log = logging.getLogger(__name__)

# a described value: (name, value, source), the first of a key's synonyms being the one in force
Synonym = tuple[str, str | None, int]


class ConfigRequests:
    """The handlers of DescribeConfigs and AlterConfigs, for RequestHandler.register. Both
    read and write ZooKeeper (off the event loop), from where every broker applies a change."""

    def __init__(
        self,
        broker_id: int,
        broker_config: dict[str, Any],
        zk: Callable[[], KazooClient],
    ) -> None:
        self.broker_id = broker_id
        self.broker_config = broker_config
        self.zk = zk

    def handlers(self) -> dict[ApiKey, Callable[[Request], Awaitable[dict | None]]]:
        return {
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.ALTER_CONFIGS: self.alter_configs,
        }

    # -- DescribeConfigs -----------------------------------------------------------------------

    async def describe_configs(self, request: Request) -> dict:
        version = request.api_version
        synonyms_wanted = request.body.get("include_synonyms", False)
        resources = []
        for resource in request.body["resources"]:
            answer: dict[str, Any] = {
                "error_code": 0,
                "error_message": None,
                "resource_type": resource["resource_type"],
                "resource_name": resource["resource_name"],
                "config_entries": [],
            }
            try:
                described = await asyncio.to_thread(
                    self._describe, resource["resource_type"], resource["resource_name"]
                )
            except KafkaError as error:
                answer.update(error_code=int(error.code), error_message=error.message)
                resources.append(answer)
                continue
            names = resource["config_names"]
            for name, (read_only, synonyms) in described.items():
                if names is not None and name not in names:
                    continue
                _, value, source = synonyms[0]
                answer["config_entries"].append(
                    {
                        "config_name": name,
                        "config_value": value,
                        "read_only": read_only,
                        "is_default": source == CONFIG_SOURCE_DEFAULT,  # v0
                        "config_source": source,  # v1 and later
                        "is_sensitive": False,
                        "config_synonyms": [
                            {"config_name": n, "config_value": v, "config_source": s}
                            for n, v, s in (synonyms if synonyms_wanted and version >= 1 else [])
                        ],
                    }
                )
            resources.append(answer)
        return {"throttle_time_ms": 0, "resources": resources}

    def _describe(self, resource_type: int, name: str) -> dict[str, tuple[bool, list[Synonym]]]:
        """Each key of the resource: whether it is read-only, and its synonyms (the value in
        force first: a topic's override, then the broker's setting, then the default). A topic's
        overrides are read from ZooKeeper, as Kafka reads them: what AlterConfigs wrote is
        described at once, by any broker."""
        if resource_type == RESOURCE_TOPIC:
            zk = self.zk()
            if not zk.exists(zookeeper.topic_path(name)):
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
            overrides = zookeeper.read_topic_config(zk, name)
            described = {}
            for key in TOPIC_KEYS:
                synonyms: list[Synonym] = []
                if key in overrides:
                    synonyms.append((key, overrides[key], CONFIG_SOURCE_TOPIC))
                broker_key = TOPIC_TO_BROKER_KEY.get(key)
                if broker_key is not None:
                    synonyms.append(self._broker_value(broker_key))
                else:
                    synonyms.append(
                        (key, config_text(TOPIC_KEYS[key].default), CONFIG_SOURCE_DEFAULT)
                    )
                described[key] = (False, synonyms)
            return described
        if resource_type == RESOURCE_BROKER:
            self._check_broker(name)
            return {key: (True, [self._broker_value(key)]) for key in BROKER_KEYS}
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"resource type {resource_type}: configs are served for topics "
            f"({RESOURCE_TOPIC}) and brokers ({RESOURCE_BROKER})",
        )

    def _broker_value(self, key: str) -> Synonym:
        value = self.broker_config.get(key, BROKER_KEYS[key].default)
        source = (
            CONFIG_SOURCE_DEFAULT
            if value == BROKER_KEYS[key].default
            else CONFIG_SOURCE_STATIC_BROKER
        )
        return key, None if value is None else config_text(value), source

    def _check_broker(self, name: str) -> None:
        if name != str(self.broker_id):
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"broker {name!r}: this is broker {self.broker_id}; ask each broker for its own "
                "settings",
            )

    # -- AlterConfigs --------------------------------------------------------------------------

    async def alter_configs(self, request: Request) -> dict:
        validate_only = request.body["validate_only"]
        resources = []
        for resource in request.body["resources"]:
            kind, name = resource["resource_type"], resource["resource_name"]
            code, message = ErrorCode.NONE, None
            try:
                entries = {e["config_name"]: e["config_value"] for e in resource["config_entries"]}
                await self._alter(kind, name, entries, validate_only)
                if not validate_only:
                    log.info("AlterConfigs from %s: %s now %s", request.client_id, name, entries)
            except KafkaError as error:
                code, message = error.code, error.message
            resources.append(
                {
                    "error_code": int(code),
                    "error_message": message,
                    "resource_type": kind,
                    "resource_name": name,
                }
            )
        return {"throttle_time_ms": 0, "resources": resources}

    async def _alter(
        self, kind: int, name: str, entries: dict[str, str | None], validate_only: bool
    ) -> None:
        if kind == RESOURCE_BROKER:
            self._check_broker(name)
            if entries:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    f"cannot update {', '.join(sorted(entries))} dynamically: tidelog's broker "
                    "settings are read at start-up (set them in its properties file)",
                )
            return
        if kind != RESOURCE_TOPIC:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"resource type {kind}: AlterConfigs is served for topics ({RESOURCE_TOPIC}) "
                f"and brokers ({RESOURCE_BROKER})",
            )
        for key, value in entries.items():
            if key not in TOPIC_KEYS:
                raise KafkaError(ErrorCode.INVALID_CONFIG, unknown_key_message(key, TOPIC_KEYS))
            if value is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"{key}: a null value")
        try:
            await asyncio.to_thread(
                topics.set_topic_config,
                self.zk(),
                name,
                {k: v for k, v in entries.items() if v is not None},
                validate_only=validate_only,
            )
        except ConfigError as error:
            raise KafkaError(ErrorCode.INVALID_REQUEST, str(error)) from None
