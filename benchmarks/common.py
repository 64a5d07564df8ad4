"""Pieces the cluster benchmarks share."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tidelog.cluster.faults import wait_for_full_isr
from tidelog.cluster.local import LocalCluster
from tidelog.controller import topics, zookeeper

RECORD = 1024
MB = 1_000_000


def create_topic(
    cluster: LocalCluster,
    name: str,
    partitions: int = 1,
    replication_factor: int = 1,
    config: dict[str, str] | None = None,
) -> None:
    """Creates a topic and waits until its leaders serve it with a full ISR."""
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, name, partitions, replication_factor, config or {})
    wait_for_full_isr(cluster, name)
    import time

    time.sleep(1.0)  # every broker's cache learns of the topic through its watches


def quiet(_: str) -> None:
    pass


@contextlib.contextmanager
def code_at(ref: str) -> Iterator[dict[str, str]]:
    """The environment that runs tidelog from ``ref`` (a commit, branch or tag of this
    repository): a git worktree of it in a temporary directory, its C extensions built in place
    (where they do not build, its Python paths do the same work), first on PYTHONPATH, and this
    tree's benchmarks after it. A process started with it imports that tree's tidelog, so a
    LocalCluster brought up under it runs the baseline's brokers beside this tree's, for
    before/after figures in one run.

    PYTHONSAFEPATH keeps the working directory (``python -m``, ``-c``) and a script's directory
    off the front of sys.path: run from this repository's root, ``python -m tidelog.cli`` found
    this tree's tidelog there before PYTHONPATH's, and until this was set every such comparison
    ran this tree's brokers on both sides."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="tidelog-baseline-") as directory:
        tree = Path(directory) / "tree"
        subprocess.run(
            ["git", "-C", str(root), "worktree", "add", "--detach", "--quiet", str(tree), ref],
            check=True,
        )
        try:
            subprocess.run(
                [sys.executable, "setup.py", "build_ext", "--inplace", "--quiet"],
                cwd=tree,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
            benchmarks = Path(__file__).resolve().parent  # a script's own imports (common)
            yield {
                **os.environ,
                "PYTHONPATH": os.pathsep.join((str(tree), str(benchmarks))),
                "PYTHONSAFEPATH": "1",
            }
        finally:
            subprocess.run(
                ["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], check=False
            )


@contextlib.contextmanager
def environment(env: dict[str, str] | None) -> Iterator[None]:
    """os.environ is ``env`` inside the block (processes started there inherit it)."""
    if env is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
