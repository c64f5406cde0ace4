"""Two builds to one `--out`: the second never replaces the first's set without `--overwrite`.

Both used to exit 0 and print "verify passed", the first build's set silently replaced by the
second's (a folder of the user's appearing meanwhile was refused, a draftset output was not).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir

import draftset.pipeline.build as build_mod
from draftset.config.options import BuildOptions
from draftset.output.folder import OutputExistsError
from draftset.pipeline.build import run_build
from draftset.sources.read import Source


def _source(tmp: Path, name: str, answer: str) -> Source:
    path = tmp / f"{name}.jsonl"
    row = {
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": answer}]
    }
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return Source(name, path)


def _build(src: Source, out: Path, overwrite: bool = False) -> Path:
    opts = BuildOptions([src], str(qwen3_tokenizer_dir()), out, workers=1, overwrite=overwrite)
    return run_build(opts).out


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_set_that_appears_during_the_build_is_replaced_only_with_overwrite(
    tmp_path, monkeypatch, overwrite
):
    first = _build(_source(tmp_path, "a", "From A."), tmp_path / "first")
    out = tmp_path / "same"
    if overwrite:  # --overwrite given for a set that was there already
        _build(_source(tmp_path, "c", "From C."), out)
    write_manifest = build_mod.write_manifest

    def racing(folder, manifest):  # another build finishes at `out` meanwhile
        write_manifest(folder, manifest)
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(first, out)

    monkeypatch.setattr(build_mod, "write_manifest", racing)
    second = _source(tmp_path, "b", "From B.")
    if not overwrite:
        with pytest.raises(OutputExistsError, match="appeared during the build"):
            _build(second, out)
        names = [i["name"] for i in json.loads((out / "manifest.json").read_text())["inputs"]]
        assert names == ["a"]  # the other build's set, left as it is
        assert not list(tmp_path.glob(".same*"))  # and no half-written folder behind
    else:
        _build(second, out, overwrite=True)  # replacing what is there is what was asked
        names = [i["name"] for i in json.loads((out / "manifest.json").read_text())["inputs"]]
        assert names == ["b"]


# A child that builds a tiny set by hand (no tokenizer) and replaces `out` with it, killed with
# SIGKILL at one step of `finalize_output`: between the two renames, or while the old set is
# being removed.
_KILLED_AT = """
import hashlib, json, os, pathlib, signal, shutil, sys
import draftset.output.folder as F

out, step = pathlib.Path(sys.argv[1]), sys.argv[2]
tmp = F.prepare_output(out, overwrite=True)
(tmp / "rows.bin").write_bytes(b"new" * 1000)
files = {"rows.bin": hashlib.sha256(b"new" * 1000).hexdigest()}
manifest = {"format": "draftset/1", "files": files, "set": "new"}
(tmp / "manifest.json").write_text(json.dumps(manifest))
rename, rmtree = pathlib.Path.rename, shutil.rmtree

def killing_rename(self, target):
    done = rename(self, target)
    if step == "rename" and "draftset-old" in str(target):
        os.kill(os.getpid(), signal.SIGKILL)
    return done

def killing_rmtree(path, *args, **kwargs):
    if step == "rmtree" and "draftset-old" in str(path):
        (pathlib.Path(path) / "rows.bin").unlink()  # half removed
        os.kill(os.getpid(), signal.SIGKILL)
    return rmtree(path, *args, **kwargs)

pathlib.Path.rename = killing_rename
F.shutil.rmtree = killing_rmtree
F.finalize_output(tmp, out)
"""


def _fake_set(folder: Path, name: str) -> None:
    folder.mkdir()
    (folder / "rows.bin").write_bytes(name.encode() * 1000)
    files = {"rows.bin": hashlib.sha256(name.encode() * 1000).hexdigest()}
    manifest = {"format": "draftset/1", "files": files, "set": name}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _set_name(folder: Path) -> str:
    return json.loads((folder / "manifest.json").read_text())["set"]


@pytest.mark.parametrize("step", ["rename", "rmtree"])
def test_a_build_killed_while_it_replaces_the_old_set_leaves_nothing_the_next_build_keeps(
    tmp_path, step
):
    """kill -9 between the two renames left the old set in `.out.draftset-old-PID` and the
    finished new one, its marker already gone, in `.out.draftset-tmp-PID`; killed while the
    old set was being removed, a half-removed `.out.draftset-old-PID`: nothing removed either,
    ever. Now the next build on that --out puts the old set back (killed between the renames:
    the build never finished) or keeps the new one it renamed into place, and removes the
    rest."""
    import subprocess
    import sys

    from conftest import REPO

    from draftset.output.folder import TMP_MARKER, prepare_output, replaceable

    out = tmp_path / "out"
    _fake_set(out, "old")
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    child = [sys.executable, "-c", _KILLED_AT, str(out), step]
    proc = subprocess.run(child, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out."))
    assert left, "the kill left nothing to clean up: the test did not reach its step"
    if step == "rename":  # the new set, not renamed, still says it is no finished set
        (tmp,) = tmp_path.glob(".out.draftset-tmp-*")
        assert (tmp / TMP_MARKER).exists()
    else:  # the new set is in place; --overwrite may replace it (the marker is the dead run's)
        assert _set_name(out) == "new" and replaceable(out)
    new = prepare_output(out, overwrite=True)  # the next build on the same --out
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")] == [new.name]
    assert _set_name(out) == ("old" if step == "rename" else "new")
    assert (out / "rows.bin").exists()
    assert not (out / TMP_MARKER).exists()


def test_only_old_sets_a_marker_proves_draftset_s_are_removed(tmp_path):
    """A `.out.draftset-old-PID` folder no marker of that dead process vouches for (no
    temporary folder of its replacing `out`, no marker in `out`) is the user's: kept."""
    import subprocess
    import sys

    from draftset.output.folder import remove_stale_tmp

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    out = tmp_path / "out"
    _fake_set(out, "current")
    _fake_set(tmp_path / f".out.draftset-old-{p.pid}", "users")
    assert remove_stale_tmp(out) == []
    assert _set_name(tmp_path / f".out.draftset-old-{p.pid}") == "users"
    assert _set_name(out) == "current"


@pytest.mark.parametrize("overwrite", [False, True])
def test_every_file_of_the_set_is_on_disk_before_the_set_is_renamed_into_place(
    tmp_path, monkeypatch, overwrite
):
    """A rename is atomic for processes, not for a power cut: the kernel may write the rename
    before the files' data, leaving a ``DIR`` that looks finished with empty or cut shards. Every
    file and folder of the set is flushed (fsync) before the rename puts it at ``DIR``, and
    ``DIR``'s parent after it (the rename itself)."""
    import os

    src = _source(tmp_path, "a", "one")
    out = tmp_path / "out"
    if overwrite:
        _build(src, out)
    synced: list[str] = []
    renamed_at: list[int] = []
    real_fsync, real_rename = os.fsync, Path.rename

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def rename(self: Path, target: Path) -> Path:
        if Path(target) == out:
            renamed_at.append(len(synced))
        return real_rename(self, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(Path, "rename", rename)
    _build(src, out, overwrite=overwrite)
    assert len(renamed_at) == 1
    before = {Path(p).name for p in synced[: renamed_at[0]]}
    files = sorted(p.name for p in out.rglob("*") if p.is_file())
    assert files and set(files) <= before, sorted(set(files) - before)
    assert any(Path(p) == tmp_path for p in synced[renamed_at[0] :])  # the rename, made durable


def test_a_replaced_set_that_cannot_be_removed_leaves_the_new_set_finished_with_a_note(
    tmp_path, monkeypatch
):
    """The new set was in place and whole when removing the set it replaced failed (EIO, a
    file held open on a network disk): the build exited 1 as if it had failed, with the set's
    marker still in ``DIR``. The build stands now, its summary naming the folder left behind;
    the marker stays in ``DIR`` until then, vouching for that folder, so the next build on
    ``DIR`` removes it."""
    import errno

    import draftset.output.folder as folder_mod
    from draftset.output.folder import TMP_MARKER, remove_stale_tmp

    answer = "A longer answer, so that the drafter has consecutive tokens to learn from."
    out = tmp_path / "out"
    _build(_source(tmp_path, "a", answer), out)
    real_rmtree = shutil.rmtree

    def failing(path, *args, **kwargs):
        if "draftset-old" in str(path):
            raise OSError(errno.EIO, "Input/output error", str(path))
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(folder_mod.shutil, "rmtree", failing)
    opts = BuildOptions(
        [_source(tmp_path, "b", answer)], str(qwen3_tokenizer_dir()), out, workers=1, overwrite=True
    )
    result = run_build(opts)
    assert result.ok, result.checks  # the set in place passes its checks, marker and all
    names = [i["name"] for i in json.loads((out / "manifest.json").read_text())["inputs"]]
    assert names == ["b"]
    (old,) = tmp_path.glob(".out.draftset-old-*")
    assert [n for n in result.notes if str(old) in n and "could not be removed" in n]
    assert json.loads((out / TMP_MARKER).read_text())["replacing"] is True
    monkeypatch.setattr(folder_mod.shutil, "rmtree", real_rmtree)
    # the build has ended: its process is one that is gone now
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    marker = json.loads((out / TMP_MARKER).read_text())
    (out / TMP_MARKER).write_text(json.dumps({**marker, "pid": gone.pid}))
    old = old.rename(tmp_path / f".out.draftset-old-{gone.pid}")
    assert remove_stale_tmp(out) == [old]
    assert not (out / TMP_MARKER).exists()
