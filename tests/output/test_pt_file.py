"""token_freq.pt without torch (`draftset.output.pt_file`), held to torch itself: torch.load
(speculators' reader, ``weights_only=True``) reads what is written here to the same dict,
``data.pkl`` is byte for byte torch.save's, and torch.save's files read back here alike."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from draftset.output.pt_file import ForeignPickle, read_pt, write_pt
from draftset.output.vocab import (
    TokenFreqPtShape,
    load_token_freq_pt,
    read_token_freq_pt,
    write_token_freq,
)

torch = pytest.importorskip("torch")  # the referee: installed by the test setup

CASES = {
    "empty": {},
    "one": {151645: 1},
    "small ids and counts": {0: 1, 1: 255, 2: 256, 3: 65535, 4: 65536},
    "int32 and int64 counts": {7: 2**31 - 1, 8: 2**31, 9: 2**40, 10: 2**63 - 1},
    # past 1,000 items pickle writes SETITEMS in batches: a real vocabulary's size
    "a vocabulary": {i: (i * 7919) % 100_003 + 1 for i in range(0, 151_669, 3)},
}


def _data_pkl(raw: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        return archive.read(name)


@pytest.mark.parametrize("case", list(CASES))
def test_torch_load_reads_what_is_written_here_and_the_pickle_is_torch_saves(tmp_path, case):
    obj = CASES[case]
    write_pt(tmp_path / "f.pt", obj)
    loaded = torch.load(tmp_path / "f.pt", weights_only=True)
    assert loaded == obj and all(type(k) is int and type(v) is int for k, v in loaded.items())
    theirs = io.BytesIO()
    torch.save(obj, theirs)
    assert _data_pkl((tmp_path / "f.pt").read_bytes()) == _data_pkl(theirs.getvalue())
    # and torch's own file reads back here to the same dict
    (tmp_path / "t.pt").write_bytes(theirs.getvalue())
    assert read_pt(tmp_path / "t.pt") == obj


def test_the_records_are_the_ones_torch_save_writes(tmp_path):
    """Same record names and values (torch's serialization_id aside, which torch.load does not
    need): a reader that looks for any of them finds it."""
    write_pt(tmp_path / "f.pt", {1: 2})
    theirs = io.BytesIO()
    torch.save({1: 2}, theirs)
    with zipfile.ZipFile(tmp_path / "f.pt") as ours, zipfile.ZipFile(theirs) as ref:
        ref_records = {n: ref.read(n) for n in ref.namelist() if "serialization_id" not in n}
        assert {n: ours.read(n) for n in ours.namelist()} == ref_records
        assert all(i.compress_type == zipfile.ZIP_STORED for i in ours.infolist())


def test_the_same_counts_give_the_same_bytes_whenever_written(tmp_path, monkeypatch):
    """A set is byte-identical however and whenever it is built: no time stamp inside."""
    import time

    write_pt(tmp_path / "a.pt", CASES["small ids and counts"])
    real = time.time()
    monkeypatch.setattr(time, "time", lambda: real + 86_400 * 400)  # zipfile's "now"
    monkeypatch.setattr(time, "localtime", lambda *a: time.gmtime(real + 86_400 * 400))
    write_pt(tmp_path / "b.pt", CASES["small ids and counts"])
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()


def test_write_token_freq_writes_a_pt_equal_to_torch_saves_of_the_counts(tmp_path):
    freq = np.zeros(151_669, dtype=np.int64)
    freq[[3, 7, 151643]] = [5, 1, 9]
    write_token_freq(tmp_path, freq)
    expected = {3: 5, 7: 1, 151643: 9}
    assert torch.load(tmp_path / "token_freq.pt", weights_only=True) == expected
    assert read_token_freq_pt(tmp_path / "token_freq.pt") == expected
    assert load_token_freq_pt(tmp_path / "token_freq.pt") == expected
    assert np.array_equal(np.load(tmp_path / "token_freq.npy"), freq)


def test_a_file_holding_a_tensor_is_refused_unrun(tmp_path):
    """A pickle that names a global (a tensor's rebuild function, any class) is not a plain
    dict: refused before anything it names is imported or called."""
    torch.save({1: torch.tensor(5)}, tmp_path / "t.pt")
    with pytest.raises(ForeignPickle):
        read_pt(tmp_path / "t.pt")
    with pytest.raises(TokenFreqPtShape, match="more than a plain dict"):
        read_token_freq_pt(tmp_path / "t.pt")


def test_a_damaged_file_raises(tmp_path):
    write_pt(tmp_path / "f.pt", {1: 2})
    raw = (tmp_path / "f.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(zipfile.BadZipFile):
        read_pt(tmp_path / "cut.pt")
    with zipfile.ZipFile(tmp_path / "noversion.pt", "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    with pytest.raises(KeyError):  # torch.load requires the version record too
        read_pt(tmp_path / "noversion.pt")
    with pytest.raises(RuntimeError):
        torch.load(tmp_path / "noversion.pt", weights_only=True)
