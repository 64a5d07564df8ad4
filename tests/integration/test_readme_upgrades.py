"""The README's upgrade paths run as written, in order, beside the rest of its walkthrough
(test_readme.py), in a directory of their own."""

from __future__ import annotations

from tests.integration.test_readme import examples, run_walkthrough


def test_every_upgrade_path_example_runs_as_written(tmp_path):
    result = run_walkthrough(examples(upgrade_paths=True), tmp_path)
    assert "verdict: PASS" in result.stdout  # the idempotent producer's scenario
