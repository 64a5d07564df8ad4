"""kcat (librdkafka, Debian's package) produces to and consumes from a tidelog cluster.

Three ways librdkafka talks to brokers of the 0.9/0.10 era: told it is a 0.9 broker (Metadata v0,
Produce v1 with format v0, Fetch v1), told it is 0.10.0 (Produce v2 with format v1, Fetch v2),
and asking ApiVersions (Fetch v3, ListOffsets v1).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.conftest import codecs_on_disk

CLIENTS = {
    "0.9": ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.9.0.1"],
    "0.10.0": ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.10.0.0"],
    "negotiated": [],
}
CODECS = ["none", "gzip", "snappy", "lz4"]


def kcat(cluster, *args: str, input: str | None = None) -> str:
    result = subprocess.run(
        ["kcat", "-b", cluster.bootstrap_servers, *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def consume(cluster, topic: str, client: list[str], count: int) -> list[tuple]:
    output = kcat(
        cluster,
        "-C", "-t", topic, "-o", "beginning", "-c", str(count), "-e", "-Z",
        "-f", "%p|%o|%k|%s|%T\\n",
        *client,
    )  # fmt: skip
    rows = [line.split("|") for line in output.splitlines() if line]
    return sorted((int(p), int(o), k, s, int(t)) for p, o, k, s, t in rows)


@pytest.mark.parametrize("client", CLIENTS, ids=list(CLIENTS))
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produces_and_consumes_keyed_and_null_messages(cluster, new_topic, client, codec):
    topic = new_topic()
    lines = [f"key-{n}:value-{n}" for n in range(20)] + ["null-value:", ":no-key"]

    kcat(
        cluster,
        "-P",
        "-t",
        topic,
        "-K:",
        "-Z",
        "-z",
        codec,
        *CLIENTS[client],
        input="\n".join(lines) + "\n",
    )
    consumed = consume(cluster, topic, CLIENTS[client], len(lines))

    assert [(o, k, s) for _, o, k, s, _ in consumed] == [
        (n, f"key-{n}", f"value-{n}") for n in range(20)
    ] + [(20, "null-value", "NULL"), (21, "NULL", "no-key")]
    # stored as sent, not just read back; librdkafka sends a batch that its codec does not make
    # smaller uncompressed
    stored = codecs_on_disk(cluster, topic)
    assert codec in stored and stored <= {codec, "none"}, stored
    timestamps = {t for *_, t in consumed}
    if client == "0.9":
        assert timestamps == {0}  # format v0 on the wire: no timestamps
    else:
        assert all(t > 1_600_000_000_000 for t in timestamps)


@pytest.mark.parametrize("client", CLIENTS, ids=list(CLIENTS))
def test_every_partition_gets_its_messages_and_the_log_end_is_listed(cluster, new_topic, client):
    topic = new_topic(partitions=3)
    lines = [f"k{n}:v{n}" for n in range(60)]

    kcat(cluster, "-P", "-t", topic, "-K:", *CLIENTS[client], input="\n".join(lines) + "\n")
    consumed = consume(cluster, topic, CLIENTS[client], 60)

    assert sorted(s for *_, s, _ in consumed) == sorted(f"v{n}" for n in range(60))
    assert {p for p, *_ in consumed} == {0, 1, 2}
    ends = kcat(cluster, "-Q", "-t", f"{topic}:0:-1", *CLIENTS[client])
    assert f"{topic} [0] offset {sum(1 for p, *_ in consumed if p == 0)}" in ends
