"""The SparkSession tidelog's jobs run in, with tidelog's data source registered: local mode on
loopback (``local[N]``), or an application on a Spark standalone cluster (``spark://HOST:PORT``),
whose executors run the same jobs on the workers. On another cluster manager (spark-submit),
the jobs take the session they are given; ``register`` adds the data source to it.

On a standalone cluster the executors run Python on the workers: tidelog must be importable by
the interpreter ``spark.pyspark.python`` names there (PYSPARK_PYTHON, else this interpreter's
path), and the files a job reads (run directories, log segments) must be at the same paths on
every worker, on a volume they share (or, for segments, in the remote tier).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from py4j.protocol import Py4JJavaError
from pyspark import SparkContext
from pyspark.sql import SparkSession

from tidelog.reach import Unreachable, refusal

LOCAL = re.compile(r"local(\[(\*|[1-9]\d*)(,[1-9]\d*)?\])?")
STANDALONE = re.compile(
    r"spark://([^\s,/:]+|\[[0-9a-fA-F:]+\]):\d+(,([^\s,/:]+|\[[0-9a-fA-F:]+\]):\d+)*"
)
MASTERS = "local, local[N], local[*], local[N,MAX_FAILURES] or spark://HOST:PORT[,HOST:PORT...]"
STANDALONE_PORT = 7077
# How long a master may take to accept the application and give it an executor
EXECUTOR_TIMEOUT = 60.0
CONNECT_TIMEOUT = 5.0
# How long a master that took the connection may take to answer tidelog's probe (a Spark RPC)
ANSWER_TIMEOUT = 10.0
PROGRESS_SECONDS = 10.0


def register(spark: SparkSession) -> SparkSession:
    """Makes ``format("tidelog")`` known to ``spark`` (read and readStream)."""
    from tidelog.pipeline.source import TidelogDataSource

    spark.dataSource.register(TidelogDataSource)
    return spark


def check_master(master: str) -> str:
    """``master`` if tidelog can run on it (local mode, or a standalone cluster's master, or
    several for a master with standbys), else ValueError saying what can be given."""
    if LOCAL.fullmatch(master) or STANDALONE.fullmatch(master):
        return master
    raise ValueError(f"--master {master!r} is not a Spark master tidelog runs on: give {MASTERS}")


# The driver's JIT compiles with C1 only. A report is some fifty short queries on small
# tables, each planned and code-generated anew, and C2's compilations of that code were half
# the driver's CPU: a cold report of a 3,000-record run took 65-69 CPU seconds of the JVM with
# both compilers, 31-38 with C1 alone; a warm one 27-30 against 15-17. The driver is a
# local-mode session's only executor; a standalone cluster's executors keep both compilers.
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


def _common(builder: SparkSession.Builder) -> SparkSession.Builder:
    """What every session of tidelog's gets: no UI, Python data sources get the filters pushed
    down, times shown in UTC, the driver's JVM on DRIVER_JAVA_OPTIONS."""
    return (
        builder.config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
    )


def local_session(cores: int = 2, app_name: str = "tidelog") -> SparkSession:
    """A local-mode session on ``cores`` cores (or the one already running in this process)."""
    return session(f"local[{cores}]", app_name)


def session(
    master: str = "local[2]",
    app_name: str = "tidelog",
    cores: int | None = None,
    executor_timeout: float = EXECUTOR_TIMEOUT,
) -> SparkSession:
    """A session on ``master`` (or the one already running in this process).

    Local mode: Spark binds 127.0.0.1 only; Python workers run this interpreter, so they import
    tidelog. The driver (which is the executor in local mode) gets TIDELOG_SPARK_MEMORY, 2g by
    default.

    A standalone cluster (``spark://``): the application takes at most ``cores`` cores of the
    cluster (every core it offers if None), TIDELOG_SPARK_EXECUTOR_MEMORY (1g) per executor; the
    driver listens on the address this host reaches the master from (or
    TIDELOG_SPARK_DRIVER_HOST), as the executors connect back to it. Unreachable if no master
    takes a connection within seconds, or none gives the application an executor within
    ``executor_timeout`` seconds (a master without workers, or with too few free resources).
    """
    check_master(master)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        match = LOCAL.fullmatch(master)
        threads = match.group(2) if match else None
        every = os.cpu_count() or 2
        parallelism = every if threads == "*" else int(threads or 1)
        builder = (
            SparkSession.builder.master(master)
            .config("spark.driver.memory", os.environ.get("TIDELOG_SPARK_MEMORY", "2g"))
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", str(max(2, parallelism * 2)))
        )
        spark = _common(builder.appName(app_name)).getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        return register(spark)
    return register(_standalone(master, app_name, cores, executor_timeout))


def _masters(master: str) -> list[tuple[str, int]]:
    """The (host, port) of each master in a ``spark://`` URL."""
    found = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        found.append((host.strip("[]"), int(port)))
    return found


def _driver_host(masters: list[tuple[str, int]]) -> str:
    """TIDELOG_SPARK_DRIVER_HOST, else the local address this host sends to the first master
    from (a UDP socket's connect sends nothing: it only picks the route)."""
    given = os.environ.get("TIDELOG_SPARK_DRIVER_HOST")
    if given:
        return given
    host, port = masters[0]
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    except socket.gaierror:
        return socket.gethostname()
    with socket.socket(family[0], socket.SOCK_DGRAM) as probe:
        probe.connect(family[4])
        return str(probe.getsockname()[0])


# Spark's transport protocol (org.apache.spark.network.protocol): a frame is its length (8
# bytes, itself included), the message's type (1 byte) and the message. An RpcRequest (type 3)
# is a request id (8 bytes) and its body's length (4 bytes), then the body: a NettyRpcEnv
# RequestMessage, i.e. the sender's and the receiver's addresses (a boolean each: none here),
# the endpoint's name (Java's writeUTF), then the content, Java-serialized (a String here).
RPC_REQUEST, RPC_RESPONSE, RPC_FAILURE = 3, 4, 5
PROBE_ID = 0x7469_6465_6C6F_6701  # any id: the answer carries it back
PROBE_ENDPOINT = b"tidelog-probe"  # no such endpoint: the answer is a "Could not find" failure
PROBE_READ = 1 << 16  # the failure's text is a stack trace, about 3 KB


def _probe_request() -> bytes:
    content = b"\xac\xed\x00\x05" + b"\x74" + struct.pack(">H", 5) + b"probe"
    body = b"\x00\x00" + struct.pack(">H", len(PROBE_ENDPOINT)) + PROBE_ENDPOINT + content
    header = struct.pack(">bqi", RPC_REQUEST, PROBE_ID, len(body))
    return struct.pack(">q", 8 + len(header) + len(body)) + header + body


def silence(host: str, port: int, timeout: float = ANSWER_TIMEOUT) -> str | None:
    """Why a Spark master at ``host:port`` cannot take a job: nothing takes the connection,
    or it takes it and says nothing to a Spark RPC for ``timeout`` seconds (Spark's own client
    would try to register the job three times, 20 s each, before it gave up). None if it
    answers: a master (any Spark RPC server) answers the probe at once with a failure, as it
    names an endpoint there is none of. Any other answer, or a close, is None too: Spark then
    says what it makes of that end."""
    reason = refusal(f"{host}:{port}", CONNECT_TIMEOUT, STANDALONE_PORT)
    if reason:
        return reason
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT) as connection:
            connection.sendall(_probe_request())
            connection.settimeout(timeout)
            answer = connection.recv(PROBE_READ)
            _drain(connection, answer)
    except TimeoutError:
        return f"it took the connection but did not answer a Spark RPC in {timeout:g} s"
    except OSError:  # reset under the probe: an answer of a kind
        pass
    return None


def _drain(connection: socket.socket, answer: bytes) -> None:
    """The rest of the answer's frame (its first 8 bytes say how long it is), read before the
    connection closes: a close with unread data is a reset, which the master logs."""
    length = min(int.from_bytes(answer[:8], "big"), PROBE_READ) if len(answer) >= 8 else 0
    connection.settimeout(CONNECT_TIMEOUT)
    with contextlib.suppress(OSError):
        while len(answer) < length:
            more = connection.recv(length - len(answer))
            if not more:
                return
            answer += more


def _standalone(
    master: str, app_name: str, cores: int | None, executor_timeout: float
) -> SparkSession:
    masters = _masters(master)
    reasons = [silence(h, p) for h, p in masters]
    if all(reasons):
        raise Unreachable("Spark master", master, "; ".join(r for r in reasons if r))
    driver = _driver_host(masters)
    # the JVM binds what SPARK_LOCAL_IP says (the tools image says 127.0.0.1, for local mode)
    os.environ["SPARK_LOCAL_IP"] = driver
    # the executors' Python, and the driver's planners' (a Python data source's instance)
    python = os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_PYTHON"] = python
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.memory", os.environ.get("TIDELOG_SPARK_MEMORY", "2g"))
        .config("spark.executor.memory", os.environ.get("TIDELOG_SPARK_EXECUTOR_MEMORY", "1g"))
        .config("spark.driver.host", driver)
        .config("spark.driver.bindAddress", driver)
        .config("spark.pyspark.python", python)
        .config("spark.pyspark.driver.python", sys.executable)
    )
    if cores is not None:
        builder = builder.config("spark.cores.max", str(cores))
    try:
        spark = _common(builder).getOrCreate()
    except Py4JJavaError as error:
        if "stopped SparkContext" not in str(error):
            raise
        # the master answered the probe and never registered the application: Spark gave up
        # (its standalone client tries three times, 20 s each) and stopped the context
        context = SparkContext._active_spark_context
        if context is not None:
            context.stop()
        raise Unreachable(
            "Spark master", master, "it took the connection but never registered the job"
        ) from None
    spark.sparkContext.setLogLevel("ERROR")
    try:
        executors = wait_for_executors(spark, executor_timeout)
    except Unreachable:
        spark.stop()
        raise
    spark.conf.set("spark.sql.shuffle.partitions", str(max(2, 2 * cores_of(spark, executors))))
    return spark


def executors(spark: SparkSession) -> int:
    """How many executors the application has (the driver is not one, except in local mode)."""
    jvm_context = spark.sparkContext._jsc.sc()
    return max(0, int(jvm_context.getExecutorMemoryStatus().size()) - 1)


def cores_of(spark: SparkSession, count: int) -> int:
    """The cores the application's executors have (Spark's default parallelism on a cluster)."""
    return max(count, spark.sparkContext.defaultParallelism)


def wait_for_executors(spark: SparkSession, timeout: float, settle: float = 2.0) -> int:
    """The number of executors once the master has given the application one and no more
    came for ``settle`` seconds, or Unreachable after ``timeout`` seconds without any (or
    once the context stopped: Spark gave up on the master)."""
    deadline = time.monotonic() + timeout
    master = str(spark.sparkContext.master)
    jvm_context = spark.sparkContext._jsc.sc()
    count, changed = 0, time.monotonic()
    while True:
        if jvm_context.isStopped():
            break
        found = executors(spark)
        now = time.monotonic()
        if found != count:
            count, changed = found, now
        if count and now - changed >= settle:
            return count
        if not count and now > deadline:
            break
        time.sleep(0.2)
    raise Unreachable(
        "Spark master",
        master,
        f"no executor in {timeout:g} s: no worker has a free core and "
        f"{os.environ.get('TIDELOG_SPARK_EXECUTOR_MEMORY', '1g')} of free memory",
    )


@contextlib.contextmanager
def progress(
    spark: SparkSession, stream: TextIO | None, every: float = PROGRESS_SECONDS
) -> Iterator[None]:
    """While the block runs, a line on ``stream`` every ``every`` seconds in which Spark runs a
    stage: its tasks done of all, and how long the block has run (nothing if ``stream`` is
    None, or for a block shorter than ``every``)."""
    if stream is None:
        yield
        return
    done = threading.Event()
    started = time.monotonic()
    tracker = spark.sparkContext.statusTracker()

    def report() -> None:
        while not done.wait(every):
            try:
                stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            except Exception:  # the context stopping under the block's feet
                return
            running = [s for s in stages if s is not None]
            if not running:
                continue
            tasks = sum(s.numTasks for s in running)
            finished = sum(s.numCompletedTasks for s in running)
            elapsed = time.monotonic() - started
            print(
                f"Spark: {len(running)} stage(s) running, {finished}/{tasks} tasks done "
                f"({elapsed:.0f} s)",
                file=stream,
                flush=True,
            )

    thread = threading.Thread(target=report, name="spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
