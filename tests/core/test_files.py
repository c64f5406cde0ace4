"""write_json_atomic: all or nothing, no temporary file left behind."""

from __future__ import annotations

import json

import pytest

from draftset.core.files import write_json_atomic


def test_writes_json_and_replaces_the_old_file(tmp_path):
    path = tmp_path / "state.json"
    path.write_text('{"old": true}\n')
    write_json_atomic(path, {"é": [1, 2]}, indent=1)
    assert path.read_text(encoding="utf-8") == '{\n "é": [\n  1,\n  2\n ]\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "state.json"
    path.write_text('{"old": true}\n')
    with pytest.raises(TypeError):
        write_json_atomic(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
