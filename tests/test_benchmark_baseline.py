"""The benchmarks' ``--against REF``: the baseline's processes run the baseline's code, wherever
they are started from (benchmarks/common.py, code_at)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import code_at  # noqa: E402


def test_a_process_started_from_the_repositorys_root_imports_the_baselines_tidelog() -> None:
    # as a LocalCluster starts its brokers (python -m tidelog.cli) from shape.py run at the root
    with code_at("HEAD") as env:
        imported = subprocess.run(
            [sys.executable, "-c", "import tidelog.cli; print(tidelog.cli.__file__)"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
        baseline = env["PYTHONPATH"].split(os.pathsep)[0]
        assert imported == f"{baseline}/tidelog/cli/__init__.py"
