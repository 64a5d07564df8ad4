"""How big a tiered-storage run is and what it sends: the profiles (the design's per-broker
rates and consumer counts, and a small one for a first look), the command line's scaling of a
profile to a machine, and the two workloads (acks=all, acks=1) with their producers."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tidelog.perf.producer import ProducerSettings
from tidelog.records.format import Codec

MB = 1_000_000
MIB = 1024 * 1024  # segment and retention sizes


@dataclass(frozen=True)
class Profile:
    """How big a run is. Rates are per broker, as the design gives them: a broker leads
    1/brokers of the partitions, so the cluster's producers send ``brokers`` times the rate.
    ``history_mb_per_broker`` is what each broker holds before the cases start (replication
    factor 3 on 3 brokers: the whole topic); ``local_retention_bytes`` is per partition."""

    name: str
    brokers: int
    partitions: int
    record_size: int  # the design's: 30 MB/s at ~62K messages/s, about 480 bytes
    keys: int
    acks_all_mb_per_broker: float
    acks_1_mb_per_broker: float
    in_sync_consumers: int  # each reads everything produced: the design's 4x
    catch_up_consumers: int
    catch_up_mb_per_broker: float  # all catching-up readers together, per broker
    history_mb_per_broker: float
    duration_s: float
    segment_bytes: int
    local_retention_bytes: int
    rebuild_timeout_s: float
    # KIP-73's replication throttle on the rebuild, in MB/s per broker (None: unthrottled, as
    # the design's case 3 ran)
    rebuild_throttle_mb_s: float | None = None


PROFILES: dict[str, Profile] = {
    # for the tests and a first look: a few minutes on 2 shared cores
    "small": Profile(
        name="small",
        brokers=3,
        partitions=12,
        record_size=480,
        keys=1000,
        acks_all_mb_per_broker=0.3,
        acks_1_mb_per_broker=0.55,
        in_sync_consumers=2,
        catch_up_consumers=3,
        catch_up_mb_per_broker=1.8,
        history_mb_per_broker=20,
        duration_s=15,
        segment_bytes=256 * 1024,
        local_retention_bytes=256 * 1024,
        rebuild_timeout_s=300,
    ),
    # the design's per-broker rates and consumer counts; partitions and data scaled to what one
    # machine holds (the design: 6,300 partitions on 5 brokers, 12 TB and 34 TB per broker)
    "full": Profile(
        name="full",
        brokers=3,
        partitions=300,
        record_size=480,
        keys=100_000,
        acks_all_mb_per_broker=30,
        acks_1_mb_per_broker=55,
        in_sync_consumers=4,
        catch_up_consumers=9,
        catch_up_mb_per_broker=180,
        history_mb_per_broker=2000,
        duration_s=120,
        segment_bytes=1024 * 1024,
        # a partition holds about 6.7 MB of history: the tier takes most of it
        local_retention_bytes=1024 * 1024,
        rebuild_timeout_s=3600,
    ),
}


@dataclass(frozen=True)
class Workload:
    name: str  # as rundata.WORKLOADS spells it
    acks: int
    rate_field: str  # the Profile field with its MB/s per broker

    def mb_per_broker(self, profile: Profile) -> float:
        return float(getattr(profile, self.rate_field))

    def producer(
        self,
        topic: str,
        records_per_s: float,
        seconds: float,
        record_size: int,
        seed: int,
        keys: int,
    ) -> ProducerSettings:
        """The workload's producer, as the design's: keyed snappy records to ``topic`` at
        ``records_per_s`` for ``seconds``."""
        return ProducerSettings(
            topic=topic,
            num_records=max(1, int(records_per_s * seconds)),
            record_size=record_size,
            throughput=records_per_s,
            acks=self.acks,
            codec=Codec.SNAPPY,
            batch_size=64 * 1024,
            linger_ms=2,
            seed=seed,
            keys=keys,
        )


WORKLOADS: dict[str, Workload] = {
    "acks=all": Workload("acks=all", -1, "acks_all_mb_per_broker"),
    "acks=1": Workload("acks=1", 1, "acks_1_mb_per_broker"),
}


def with_overrides(
    profile: Profile,
    duration_s: float | None = None,
    history_mb: float | None = None,
    scale: float | None = None,
    partitions: int | None = None,
    segment_bytes: int | None = None,
    local_retention_bytes: int | None = None,
    rebuild_timeout_s: float | None = None,
    rebuild_throttle_mb_s: float | None = None,
) -> Profile:
    """The profile with the command line's --duration, --history-mb-per-broker, --partitions,
    --segment-bytes, --local-retention-bytes, --rebuild-timeout, --rebuild-throttle and --scale
    (a factor on every rate: the producers' and the catching-up consumers', not the throttle)."""
    changes: dict[str, Any] = scaling(  # profile fields (ints or floats) and "scale"
        duration_s,
        history_mb,
        scale,
        partitions,
        segment_bytes,
        local_retention_bytes,
        rebuild_timeout_s,
        rebuild_throttle_mb_s,
    )
    factor = changes.pop("scale", None)
    profile = replace(profile, **changes)
    if factor is not None:
        profile = replace(
            profile,
            acks_all_mb_per_broker=profile.acks_all_mb_per_broker * factor,
            acks_1_mb_per_broker=profile.acks_1_mb_per_broker * factor,
            catch_up_mb_per_broker=profile.catch_up_mb_per_broker * factor,
        )
    return profile


def scaling(
    duration_s: float | None = None,
    history_mb: float | None = None,
    scale: float | None = None,
    partitions: int | None = None,
    segment_bytes: int | None = None,
    local_retention_bytes: int | None = None,
    rebuild_timeout_s: float | None = None,
    rebuild_throttle_mb_s: float | None = None,
) -> dict[str, float]:
    """The overrides given, by the profile field they change (``scale`` by itself)."""
    given = {
        "scale": scale,
        "duration_s": duration_s,
        "history_mb_per_broker": history_mb,
        "partitions": partitions,
        "segment_bytes": segment_bytes,
        "local_retention_bytes": local_retention_bytes,
        "rebuild_timeout_s": rebuild_timeout_s,
        "rebuild_throttle_mb_s": rebuild_throttle_mb_s,
    }
    return {name: value for name, value in given.items() if value is not None}
