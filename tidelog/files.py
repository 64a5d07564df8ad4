"""Files the tools rewrite whole (a cluster's state, broker settings, journals)."""

from __future__ import annotations

import os
from pathlib import Path


def replace_text(path: Path, text: str) -> None:
    """Replaces ``path`` with ``text`` through a temporary file beside it: a process killed
    while writing leaves the old file or the new one, never a part. (Not fsynced: these files
    must survive a killed tool, not a lost machine; the log's checkpoints are written durably
    by tidelog.log.checkpoint.)"""
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(text)
    os.replace(partial, path)
