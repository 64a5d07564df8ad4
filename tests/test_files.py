"""A file a tool rewrites whole is the old one or the new one after a write that fails."""

from __future__ import annotations

import pytest

from tidelog.files import replace_text


def test_a_write_that_fails_midway_leaves_the_old_file(tmp_path):
    path = tmp_path / "cluster.json"
    replace_text(path, '{"brokers": {}}\n')
    # a lone surrogate cannot be encoded: the write stops after the file was opened, as a
    # killed process's would
    with pytest.raises(UnicodeEncodeError):
        replace_text(path, '{"brokers": "\udcff"}\n')
    assert path.read_text() == '{"brokers": {}}\n'


def test_the_new_text_replaces_the_old(tmp_path):
    path = tmp_path / "upgrade-journal.json"
    replace_text(path, "old")
    replace_text(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["upgrade-journal.json"]  # no .tmp left
