"""``token_freq.pt`` written and read without torch: a zip archive holding one pickle.

speculators reads token frequencies with ``torch.load(path, weights_only=True)`` and writes them
with ``torch.save`` of a plain ``{token id: count}`` dict. For an object without tensors, what
``torch.save`` writes is a stored (uncompressed) zip whose ``archive/data.pkl`` is exactly
``pickle.dumps(obj, protocol=2)`` (torch's pickler with nothing to persist), beside a few small
records (``archive/version`` among them, which ``torch.load`` requires). Writing that with
Python's own ``zipfile`` and ``pickle`` spares a build importing torch (~1.3 CPU-s and ~210 MB
for one small file: issue 27). The tests hold it to torch: ``torch.load`` reads every file
written here to the same dict, and ``data.pkl`` is byte for byte ``torch.save``'s.

Reading (`read_pt`) is the same in reverse, with an unpickler that refuses every global and
every persistent id: a plain dict of ints needs neither, so a file holding tensors or any
class raises `ForeignPickle` instead of running its code.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

ARCHIVE = "archive"
"""The folder ``torch.save`` puts its records in (``torch.load`` takes any one folder)."""

PICKLE_PROTOCOL = 2
"""``torch.save``'s default ``pickle_protocol``."""

RECORDS: tuple[tuple[str, bytes], ...] = (
    (".format_version", b"1"),
    (".storage_alignment", b"64"),
    ("byteorder", b"little"),
    ("version", b"3\n"),
)
"""The records ``torch.save`` (torch 2.x) writes after ``data.pkl``, with its values: the
serialization format version ``torch.load`` requires, and the others as torch writes them."""


EPOCH = (1980, 1, 1, 0, 0, 0)
"""Every record's time stamp: zip's earliest (zipfile would write the clock's time)."""


class ForeignPickle(pickle.UnpicklingError):
    """token_freq.pt's pickle names a global or a persistent id (a tensor, a class): not the
    plain dict build writes, and not run."""


def write_pt(path: Path, obj: dict[int, int]) -> None:
    """``obj`` written to ``path`` as ``torch.save(obj, path)`` would, for a plain dict of
    ints. A failed write raises the OSError the file system gave (a full disk: ENOSPC)."""
    data = pickle.dumps(obj, protocol=PICKLE_PROTOCOL)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, value in (("data.pkl", data), *RECORDS):
            archive.writestr(_record(name), value)


def _record(name: str) -> zipfile.ZipInfo:
    """A stored record with a fixed time stamp (`EPOCH`): the same counts give the same bytes
    whenever they are written, so a set stays byte-identical."""
    info = zipfile.ZipInfo(f"{ARCHIVE}/{name}", date_time=EPOCH)
    info.compress_type = zipfile.ZIP_STORED
    return info


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        raise ForeignPickle(f"it names {module}.{name} (a tensor or a class, not a plain dict)")

    def persistent_load(self, pid: object) -> object:
        raise ForeignPickle("it holds a tensor's storage (a persistent id), not a plain dict")


def read_pt(path: Path) -> object:
    """The object a torch zip archive at ``path`` holds, when it is made of Python's plain
    types (a dict of ints); `ForeignPickle` for anything that names a global, and
    `zipfile.BadZipFile` / `KeyError` / `pickle.UnpicklingError` for a damaged file."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        pickles = [n for n in names if n.count("/") == 1 and n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise KeyError(f"no single <folder>/data.pkl among {len(names)} records")
        folder = pickles[0].split("/")[0]
        archive.getinfo(f"{folder}/version")  # torch.load requires it: so does this
        data = archive.read(pickles[0])
    return _PlainUnpickler(io.BytesIO(data)).load()
