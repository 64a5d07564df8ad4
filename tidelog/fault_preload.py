"""Running under libfiu's POSIX preload, as the disk_errors fault runs a broker (``fiu-run -x``,
tidelog.cluster.faults): such a process must load its shared objects before its threads run.

libfiu's preload (1.1, and the same upstream since) looks up each real function once per
thread, with dlsym, on the thread's first call to it, and it can make that first call (strdup)
while it holds the write lock of its name cache. A thread loading a shared object meanwhile (a
Python import of a C extension, a name service module) holds the dynamic loader's lock, which
that dlsym waits for, and its own mallocs go through libfiu and wait for the cache's lock:
neither thread moves again. A broker seen so had logged its start, then answered neither
/health nor SIGTERM (its admin API's import on a pool thread against a libuv worker's first
write after a name lookup).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# the preload fiu-run -x adds to LD_PRELOAD (fiu_run_preload.so alone wraps no function)
POSIX_PRELOAD = "fiu_posix_preload.so"


def active(environment: Mapping[str, str] = os.environ) -> bool:
    """Whether this process runs under libfiu's POSIX preload."""
    return POSIX_PRELOAD in environment.get("LD_PRELOAD", "")
