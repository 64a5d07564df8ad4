"""The one ``tidelog`` command: every subcommand answers --help and says what it does."""

from __future__ import annotations

import argparse

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
