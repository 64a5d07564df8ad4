"""The broker's answer to an I/O error its log cannot recover from: it halts, as Kafka 0.10's
ReplicaManager does ("Halting due to unrecoverable I/O error"), rather than serve a log it can
no longer write. A write that failed half-way (a full disk, EIO) may have left part of a message
set in the segment; the restart's recovery, which follows an unclean stop, cuts it."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

log = logging.getLogger(__name__)
HALT_EXIT_CODE = 1


@contextlib.contextmanager
def halting_on_io_error(what: str) -> Iterator[None]:
    """Runs the block; an OSError from it ends the process at once (no clean shutdown: the
    clean-shutdown marker is not written, so the next start recovers the logs)."""
    try:
        yield
    except OSError as error:
        log.critical("Halting due to unrecoverable I/O error while %s: %s", what, error)
        logging.shutdown()
        os._exit(HALT_EXIT_CODE)
