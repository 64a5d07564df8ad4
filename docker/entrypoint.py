"""The entry point of tidelog's images: a broker, a standalone node, or a report.

    entrypoint.py broker [tidelog broker options]      the broker image
    entrypoint.py standalone [tidelog broker options]  ZooKeeper and one broker (standalone image)
    entrypoint.py report [tidelog report options]      the tools image: a report of the run data
    entrypoint.py spark-master [Master options]        the tools image: a Spark standalone master
    entrypoint.py spark-worker MASTER [Worker options] the tools image: a Spark worker of MASTER
    entrypoint.py locust [locust options]              the tools image: tidelog's locustfile

A broker's settings are Kafka's names, from /etc/tidelog/server.properties when one is mounted,
then from KAFKA_* environment variables as Confluent's images spell them (KAFKA_BROKER_ID is
broker.id: '_' is '.', '__' is '_', '___' is '-'), then the image's defaults for what is still
unset (DEFAULTS). The resulting file is written to /var/lib/tidelog/server.properties, where the
healthcheck (docker/health.sh) reads admin.listener.

Two variables serve the compose cluster's disk faults (tidelog/cluster/faults.py):
TIDELOG_FIU_CONTROL=PREFIX runs the broker under libfiu's POSIX preload (``fiu-run -x -f
PREFIX``; the broker stays the container's first process, so ``fiu-ctrl -f PREFIX ... 1`` reaches
it through ``docker exec``), and TIDELOG_WAIT_FOR_LOG_DIR_MOUNT=SECONDS holds the broker back
until a filesystem is mounted over its log dir (from the host, in the container's mount
namespace), for at most SECONDS.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

MOUNTED_CONFIG = Path("/etc/tidelog/server.properties")
EFFECTIVE_CONFIG = Path("/var/lib/tidelog/server.properties")
DEFAULTS = {
    "listeners": "PLAINTEXT://0.0.0.0:9092",
    "admin.listener": "0.0.0.0:8080",
    "log.dirs": "/var/lib/tidelog/logs",
}
STANDALONE_ZOOKEEPER = Path("/var/lib/tidelog/zookeeper")
RUN_DATA = Path("/var/lib/tidelog/runs")


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


def broker_command(arguments: list[str], environment: dict[str, str] | None = None) -> list[str]:
    """The broker's command line; under libfiu's POSIX preload when TIDELOG_FIU_CONTROL names
    the prefix of its control FIFOs (fiu-run execs the broker: it keeps this process's id)."""
    command = ["tidelog", "broker", "--config", str(EFFECTIVE_CONFIG), *arguments]
    prefix = (environment or {}).get("TIDELOG_FIU_CONTROL")
    if prefix:
        return ["fiu-run", "-x", "-f", prefix, *command]
    return command


def mounts_at(path: Path) -> int:
    """How many filesystems are mounted at ``path`` in this mount namespace (stacked)."""
    with open("/proc/self/mountinfo") as mounts:
        return sum(line.split()[4] == str(path) for line in mounts)


def wait_for_mount(log_dir: Path, seconds: float) -> None:
    """Returns once a filesystem is mounted over the log volume at ``log_dir`` (two mounts
    there: the volume's, which the image's VOLUME makes sure of, and one on top); exits the
    container if none is within ``seconds``. Counted rather than compared with the device the
    log dir was on at start, as the mount may come before this process gets that far."""
    deadline = time.monotonic() + seconds
    print(f"waiting up to {seconds:.0f} s for a filesystem to be mounted over {log_dir}")
    while mounts_at(log_dir) < 2:
        if time.monotonic() > deadline:
            print(f"no filesystem was mounted over {log_dir} within {seconds:.0f} s")
            sys.exit(1)
        time.sleep(0.1)


def broker(arguments: list[str]) -> None:
    environment = dict(os.environ)
    properties = broker_properties(environment)
    if environment.get("TIDELOG_WAIT_FOR_LOG_DIR_MOUNT"):
        log_dir = Path(properties["log.dirs"].split(",")[0])
        wait_for_mount(log_dir, float(environment["TIDELOG_WAIT_FOR_LOG_DIR_MOUNT"]))
    write_config(properties)
    command = broker_command(arguments, environment)
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


def report(arguments: list[str]) -> int:
    """``tidelog report`` with these arguments; without --out, of every run directory in the
    run-data volume (each holds a metadata.json) into its report/ directory, with the options
    given (``--master spark://spark-master:7077``, say)."""
    if "--out" not in arguments:
        from tidelog.rundata import METADATA

        runs = sorted(str(path.parent) for path in RUN_DATA.glob(f"*/{METADATA}"))
        if not runs:
            print(f"no run directories (with a {METADATA}) in {RUN_DATA}")
            return 2
        arguments = [*runs, "--out", str(RUN_DATA / "report"), *arguments]
    command = ["tidelog", "report", *arguments]
    os.execvp(command[0], command)
    return 1  # not reached: execvp replaces this process


SPARK_CLASSES = {
    "spark-master": "org.apache.spark.deploy.master.Master",
    "spark-worker": "org.apache.spark.deploy.worker.Worker",
}


def spark(role: str, arguments: list[str]) -> None:
    """A Spark standalone master or worker, started by the spark-class script PySpark ships,
    listening on this container's address (the image's SPARK_LOCAL_IP, 127.0.0.1, is for a
    report in local mode). A worker's cores and memory: SPARK_WORKER_CORES and
    SPARK_WORKER_MEMORY; its executors' files under /tmp."""
    import pyspark

    address = socket.gethostbyname(socket.gethostname())
    os.environ["SPARK_LOCAL_IP"] = address
    os.environ.setdefault("SPARK_WORKER_DIR", "/tmp/spark-work")
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    command = [str(spark_class), SPARK_CLASSES[role], "--host", address, *arguments]
    os.execv(command[0], command)


def locust(arguments: list[str]) -> None:
    """locust with tidelog's locustfile (tidelog/perf/locust/locustfile.py, as installed)."""
    from tidelog.perf import locust as package

    locustfile = Path(package.__file__).parent / "locustfile.py"
    command = [sys.executable, "-m", "locust", "-f", str(locustfile), *arguments]
    os.execv(command[0], command)


def main() -> int:
    mode, arguments = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("broker", [])
    if mode == "broker":
        broker(arguments)
    if mode == "standalone":
        return standalone(arguments)
    if mode == "report":
        return report(arguments)
    if mode == "locust":
        locust(arguments)
    if mode in SPARK_CLASSES:
        spark(mode, arguments)
    print(f"usage: {sys.argv[0]} broker|standalone|report|locust|spark-master|spark-worker ...")
    return 2


if __name__ == "__main__":
    sys.exit(main())
