"""`tidelog upgrade roll`: a compose cluster or a Swarm stack moved to another image, one broker
service at a time.

Each step recreates one broker's service from ``tidelog:{tag}`` (a clean shutdown, then a new
container on the same log volume; ``ComposeCluster.restart_broker``; in a stack ``docker service
update --image``, the image's repository kept, ``SwarmCluster.restart_broker``) and waits, as
every step of ``tidelog upgrade run`` does, until every replica is back in its ISR and no
partition is under-replicated. After the last step leadership goes back to the preferred
replicas. A broker whose container already runs the tag is left alone, so the same command after
a failure goes on from the broker where it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tidelog.cluster.compose import ComposeCluster, run_docker
from tidelog.cluster.local import ClusterError
from tidelog.cluster.swarm import SwarmCluster
from tidelog.upgrade import checks


def roll_image(
    cluster: ComposeCluster | SwarmCluster,
    tag: str,
    *,
    timeout: float = 120.0,
    progress: Callable[[str], object] = print,
) -> list[dict]:
    """Every broker of ``cluster`` recreated from ``tidelog:{tag}``, one at a time, each followed
    by the upgrade's checks; returns one row per broker (rolled or already there, seconds).
    Raises ClusterError if the image is missing or a broker does not come back, TimeoutError if
    the replicas do not catch up in ``timeout`` seconds."""
    image = cluster.image_for_tag(tag)
    try:
        run_docker(["docker", "image", "inspect", image], 60)
    except ClusterError as error:
        if "no such image" not in str(error).lower():
            raise  # an engine that did not answer in time says so, not that the image is missing
        if isinstance(cluster, ComposeCluster):
            raise ClusterError(
                f"no image {image} in the engine (build or `docker tag` it first)"
            ) from None
        # a stack's nodes pull it from its registry, which this engine need not have used
    checks.wait_in_sync(cluster, timeout)  # a roll starts from a cluster in sync
    rows = []
    for broker_id in cluster.broker_ids:
        if cluster.running_image(broker_id) == image:
            progress(f"broker {broker_id} runs {image} already")
            rows.append({"broker": broker_id, "rolled": False, "seconds": 0.0})
            continue
        started = time.monotonic()
        cluster.set_image_tag(broker_id, tag)
        cluster.restart_broker(broker_id, timeout=timeout, progress=progress)
        checks.wait_in_sync(cluster, timeout)
        seconds = round(time.monotonic() - started, 3)
        progress(
            f"broker {broker_id} runs {image}; back in every ISR, no under-replicated "
            f"partitions ({seconds} s)"
        )
        rows.append({"broker": broker_id, "rolled": True, "seconds": seconds})
    checks.elect_preferred_leaders(cluster, timeout)
    checks.wait_in_sync(cluster, timeout)
    progress(f"every broker runs {image}; leaders preferred")
    return rows
