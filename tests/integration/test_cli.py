"""Every error path of the ``tidelog`` command says what went wrong and exits non-zero, without a
traceback; a cluster that fails to start leaves nothing running."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.test_broker import tidelog
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.zookeeper import port_taken


def fails(*args: str, says: str, code: int = 2) -> str:
    result = tidelog(*args, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert says in output, output
    assert "Traceback" not in output, output
    return output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("topic", "describe", "--topic", "no-such-topic"), "UNKNOWN_TOPIC_OR_PARTITION"),
        (("topic", "delete", "--topic", "no-such-topic"), "UNKNOWN_TOPIC_OR_PARTITION"),
        (
            ("topic", "preferred-leader-election", "--topic", "no-such-topic"),
            "UNKNOWN_TOPIC_OR_PARTITION",
        ),
        (
            ("topic", "alter-config", "--topic", "no-such-topic", "--add-config", "retention.ms=1"),
            "UNKNOWN_TOPIC_OR_PARTITION",
        ),
        (("topic", "create", "--topic", "bad/name"), "INVALID_TOPIC_EXCEPTION"),
        (("topic", "create", "--topic", "t-rf", "--replication-factor", "9"), "replication factor"),
        (("topic", "create", "--topic", "t-cfg", "--config", "retention.ms=x"), "retention.ms"),
        (("topic", "create", "--topic", "t-cfg", "--config", "segment.msx=1"), "did you mean"),
        (("topic", "create", "--topic", "t-cfg", "--config", "nonsense"), "expected key=value"),
    ],
    ids=lambda value: value if isinstance(value, str) else " ".join(value[:2]),
)
def test_topic_errors_name_the_problem(cluster, args, says):
    fails(*args, "--zookeeper", cluster.zookeeper, says=says)


def test_topic_names_that_collide_on_dot_and_underscore_are_refused(cluster):
    tidelog("topic", "create", "--zookeeper", cluster.zookeeper, "--topic", "collide.here")
    output = fails(
        "topic",
        "create",
        "--zookeeper",
        cluster.zookeeper,
        "--topic",
        "collide_here",
        says="INVALID_TOPIC_EXCEPTION",
    )
    assert "collides with existing topics: collide.here" in output
    fails(
        "topic",
        "create",
        "--zookeeper",
        cluster.zookeeper,
        "--topic",
        "collide.here",
        says="TOPIC_ALREADY_EXISTS",
    )


@pytest.mark.parametrize(
    "args",
    [
        ("cluster", "status"),
        ("cluster", "down"),
        ("cluster", "start", "1"),
        ("cluster", "stop", "1"),
        ("cluster", "kill", "1"),
        ("topic", "list"),
        ("perf", "produce", "--topic", "t", "--num-records", "1"),
        ("perf", "consume", "--topic", "t", "--messages", "1"),
    ],
    ids=" ".join,
)
def test_commands_on_a_directory_without_a_cluster_say_so(tmp_path, args):
    fails(*args, "--dir", str(tmp_path / "nothing-here"), says="no cluster in")


def test_broker_and_dump_log_errors(tmp_path):
    fails("broker", "--config", str(tmp_path / "missing.properties"), says="No such file")
    properties = tmp_path / "server.properties"
    properties.write_text("broker.id=1\nlog.retention.hour=1\n")
    fails("broker", "--config", str(properties), says="did you mean 'log.retention.hours'")
    fails("broker", says="--config is required")
    fails("dump-log", str(tmp_path / "00000000000000000000.log"), says="No such file", code=1)


def test_scenario_and_perf_argument_errors_are_refused_before_anything_starts(tmp_path):
    fails(
        "scenario",
        "replication",
        "--failure",
        "truncation_failover",
        "--target",
        "follower",
        says="--target must be leader",
    )
    fails("scenario", "replication", "--failure", "meteor", says="invalid choice: 'meteor'")
    replication = ("scenario", "replication", "--failure")
    fails(*replication, "partition", "--target", "replicas", says="only with --failure power_loss")
    fails(*replication, "disk_errors", "--disk-error-ops", "scribble", says="allowed: write, read")
    fails(*replication, "disk_errors", "--disk-error-probability", "0", says="allowed: 0 < P <= 1")
    fails(*replication, "degraded", "--link-loss", "1.5", says="--link-loss 1.5: allowed")
    fails(*replication, "power_loss", "--topic-config", "flush.messages", says="expected key=value")
    fails(*replication, "partition", "--netns", "--compose", says="choose one")
    fails(*replication, "disk_full", "--swarm", "s", says="disk_full is not available on a Swarm")
    fails(
        "perf",
        "produce",
        "--topic",
        "t",
        "--num-records",
        "1",
        "--acks",
        "2",
        "--dir",
        str(tmp_path),
        says="invalid choice: '2'",
    )
    for wrong, says in (
        (["--header", "trace=1"], "--header and --compression zstd need --message-format 2"),
        (["--compression", "zstd"], "--header and --compression zstd need --message-format 2"),
        (["--message-format", "2", "--header", "novalue"], "--header 'novalue': expected KEY="),
    ):
        fails(
            "perf", "produce", "--topic", "t", "--num-records", "1", "--dir", str(tmp_path),
            *wrong, says=says,
        )  # fmt: skip


def test_an_unknown_flag_shows_the_subcommand_s_usage():
    output = fails(
        "topic",
        "create",
        "--topic",
        "x",
        "--dir",
        "d",
        "--colour",
        "red",
        says="usage: tidelog topic create",
    )
    assert "unrecognized arguments: --colour red" in output


def test_a_cluster_that_fails_to_start_stops_what_it_started_and_keeps_the_logs(tmp_path):
    directory = tmp_path / "failing"
    output = fails(
        "cluster",
        "up",
        "--brokers",
        "2",
        "--dir",
        str(directory),
        "--override",
        "log.segment.bytes=1",
        says="exited while starting",
    )
    assert "stopped what was started; the logs are kept" in output
    assert str(directory / "broker-1" / "broker.log") in output
    assert str(directory / "zookeeper" / "zookeeper.log") in output
    cluster = LocalCluster(directory)
    assert not cluster.running
    assert cluster.state is not None and cluster.state.zookeeper_process is None
    # the broker that exited first says why (the other may be stopped before it logs anything)
    logs = [(directory / f"broker-{n}" / "broker.log").read_text() for n in (1, 2)]
    assert any("log.segment.bytes" in text for text in logs), logs


def test_fixed_ports_keep_the_bootstrap_servers_across_restarts(tmp_path):
    base = 14000 + (hash(str(tmp_path)) % 200) * 10  # below the ports free_port picks
    directory = str(tmp_path / "fixed")
    first = tidelog("cluster", "up", "--brokers", "2", "--dir", directory, "--base-port", str(base))
    try:
        servers = f"127.0.0.1:{base},127.0.0.1:{base + 1}"
        assert f"bootstrap servers: {servers}" in first.stdout
        status = tidelog("cluster", "status", "--dir", directory).stdout
        assert f"bootstrap servers: {servers}" in status
        said = tidelog("cluster", "stop", "2", "--dir", directory).stdout
        assert "broker 2 stopped cleanly" in said
        said = tidelog("cluster", "start", "2", "--dir", directory).stdout
        assert "broker 2 started" in said and f"127.0.0.1:{base + 1}" in said
        fails("cluster", "up", "--dir", directory, "--base-port", str(base), says="already running")
        tidelog("cluster", "down", "--dir", directory)
        again = tidelog(
            "cluster", "up", "--brokers", "2", "--dir", directory, "--base-port", str(base)
        )
        assert f"bootstrap servers: {servers}" in again.stdout
    finally:
        tidelog("cluster", "down", "--dir", directory, check=False)
    assert not port_taken(base)


def test_dump_log_into_a_closed_pipe_exits_quietly(cluster, tmp_path):
    segment = tmp_path / "00000000000000000000.log"
    from tidelog.records.format import Record, build_message_set

    segment.write_bytes(
        build_message_set([Record(b"k", b"v" * 10, 0) for _ in range(5000)], magic=1)
    )
    dump = subprocess.Popen(
        [sys.executable, "-m", "tidelog.cli", "dump-log", "--deep-iteration", str(segment)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    head = subprocess.run(["head", "-n", "2"], stdin=dump.stdout, capture_output=True, timeout=60)
    dump.stdout.close()  # type: ignore[union-attr]
    errors = dump.stderr.read().decode()  # type: ignore[union-attr]
    dump.wait(timeout=60)
    assert len(head.stdout.splitlines()) == 2
    assert "Traceback" not in errors and "BrokenPipe" not in errors, errors
    assert json.dumps(errors) == '""'
