"""The broker's answer to an I/O error its log cannot recover from: it halts, as Kafka 0.10's
ReplicaManager does ("Halting due to unrecoverable I/O error"), rather than serve a log it can
no longer write. A write that failed half-way (a full disk, EIO) may have left part of a message
set in the segment; the restart's recovery, which follows an unclean stop, cuts it."""

from __future__ import annotations

import logging
import os
from typing import Literal

log = logging.getLogger(__name__)
HALT_EXIT_CODE = 1


class HaltOnIOError:
    """``with HaltOnIOError(what, *arguments):`` runs the block; an OSError from it ends the
    process at once (no clean shutdown: the clean-shutdown marker is not written, so the next
    start recovers the logs). ``what % arguments`` says what was being done, formatted only if
    it halts. A class rather than a generator: it wraps every append."""

    __slots__ = ("arguments", "what")

    def __init__(self, what: str, *arguments: object) -> None:
        self.what, self.arguments = what, arguments

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type | None, error: BaseException | None, traceback: object
    ) -> Literal[False]:
        if isinstance(error, OSError):
            what = self.what % self.arguments if self.arguments else self.what
            log.critical("Halting due to unrecoverable I/O error while %s: %s", what, error)
            logging.shutdown()
            os._exit(HALT_EXIT_CODE)
        return False
