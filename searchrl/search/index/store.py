"""Memory-mapped passage store: three UTF-8 blobs (ids, titles, texts) and one int64 offsets array.

Opening maps the files and reads nothing, so it takes the same few milliseconds for 7k or 25M passages,
and a row costs two offset look-ups and one slice.
"""

from __future__ import annotations

import os
import shutil
from array import array
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from searchrl.search.index.corpus import Record

FIELDS = ("ids", "titles", "texts")
OFFSETS = "offsets.npy"


class StoreError(RuntimeError):
    """A store file is missing, truncated or inconsistent."""


def blob_name(field: str) -> str:
    return f"{field}.bin"


def write_store(records: Iterable[Record], out_dir: str | Path) -> int:
    """Write a store into `out_dir` (via a temporary sibling, renamed when complete); returns the row count."""
    out = Path(out_dir)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # array('q') keeps offsets at 8 bytes each: a Python list of ints would cost ~10x that on 25M rows.
    offsets = [array("q", [0]) for _ in FIELDS]
    handles = [open(tmp / blob_name(f), "wb", buffering=1 << 20) for f in FIELDS]
    try:
        for record in records:
            for col, value in enumerate((record.id, record.title, record.text)):
                data = value.encode("utf-8")
                handles[col].write(data)
                offsets[col].append(offsets[col][-1] + len(data))
    finally:
        for handle in handles:
            handle.close()
    table = np.stack([np.frombuffer(o, dtype=np.int64) for o in offsets], axis=1)
    np.save(tmp / OFFSETS, table)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return int(table.shape[0] - 1)


class PassageStore:
    """Read-only row access to a store directory."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        offsets_path = self.directory / OFFSETS
        try:
            self._offsets = np.load(offsets_path, mmap_mode="r")
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot open passage store offsets {offsets_path}: {exc}") from exc
        if self._offsets.ndim != 2 or self._offsets.shape[1] != len(FIELDS) or self._offsets.shape[0] < 1:
            raise StoreError(f"{offsets_path} has shape {self._offsets.shape}, expected (n+1, {len(FIELDS)})")
        self._blobs: list[np.ndarray] = []
        for col, field in enumerate(FIELDS):
            path = self.directory / blob_name(field)
            expected = int(self._offsets[-1, col])
            size = path.stat().st_size if path.exists() else -1
            if size != expected:
                raise StoreError(f"{path} is {size} bytes but {offsets_path} says {expected} (truncated or missing)")
            # np.memmap refuses empty files, and an all-empty column (no titles) is legitimate.
            blob = np.memmap(path, dtype=np.uint8, mode="r") if expected else np.zeros(0, dtype=np.uint8)
            self._blobs.append(blob)

    def __len__(self) -> int:
        return int(self._offsets.shape[0] - 1)

    def _field(self, row: int, col: int) -> str:
        start, end = int(self._offsets[row, col]), int(self._offsets[row + 1, col])
        return self._blobs[col][start:end].tobytes().decode("utf-8")

    def __getitem__(self, row: int) -> Record:
        if not 0 <= row < len(self):
            raise IndexError(f"row {row} out of range for a store of {len(self)} passages")
        return Record(self._field(row, 0), self._field(row, 1), self._field(row, 2))

    def text(self, row: int) -> str:
        return self._field(row, 2)

    def title(self, row: int) -> str:
        return self._field(row, 1)
