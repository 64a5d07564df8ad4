"""The one ``tidelog`` command: every subcommand answers --help and says what it does."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from tidelog.cli import build_parser, main


def subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield (*path, name), child
                yield from subcommands(child, (*path, name))


@pytest.mark.parametrize("path", [path for path, _ in subcommands(build_parser())], ids=" ".join)
def test_every_subcommand_answers_help(path, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*path, "--help"])

    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: tidelog {' '.join(path)}")
    description = dict(subcommands(build_parser()))[path].description
    assert description, f"tidelog {' '.join(path)} has no description"


@pytest.mark.parametrize("command", ["dump-log", "cluster", "topic", "broker"])
def test_a_command_builds_only_its_own_group_and_pays_for_no_others_imports(command):
    """The perf, scenario and report groups import pyarrow, numpy and the fault catalogue for
    their choices, about a second of CPU: a command of another group (every broker of a local
    cluster, each `tidelog cluster` call) does not."""
    code = (
        "import sys\n"
        "from tidelog.cli import main\n"
        "try:\n"
        f"    main([{command!r}, '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('imported:', sorted(m for m in HEAVY if m in sys.modules))\n"
    ).replace("HEAVY", repr(("pyarrow", "numpy", "tidelog.cluster.faults", "tidelog.rundata")))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert done.stdout.splitlines()[-1] == "imported: []"
