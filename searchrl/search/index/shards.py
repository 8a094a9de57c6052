"""fp16 embedding shards: atomic writing, memory-mapped row access, and the split of shards across devices.

Row i of the corpus is row i of the concatenated shards (shard s holds rows s*shard_size onwards), so every
index type over the shards uses the store's row numbers as ids.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from searchrl.search.index.layout import EMBED_DIR


def shard_path(out: Path, shard: int) -> Path:
    return out / EMBED_DIR / f"shard_{shard:05d}.npy"


def shard_paths(out: Path, n_shards: int) -> list[Path]:
    return [shard_path(out, i) for i in range(n_shards)]


def write_shard(path: Path, vectors: np.ndarray) -> None:
    """Save under a temp name, fsync, then rename: a crash never leaves a finished-looking partial shard."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        np.save(handle, np.ascontiguousarray(vectors, dtype=np.float16))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def split_ranges(items: Sequence[int], weights: Sequence[int], parts: int) -> list[list[int]]:
    """Cut `items` (in order) into at most `parts` contiguous, disjoint runs of near-equal total weight.

    Every item lands in exactly one run; a run is never empty, so fewer items than parts gives fewer runs.
    """
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    total = sum(weights)
    runs: list[list[int]] = []
    current: list[int] = []
    done = 0
    for item, weight in zip(items, weights, strict=True):
        current.append(item)
        done += weight
        # Close a run once it reaches its share of the total, keeping enough items for the runs still to come.
        if len(runs) < parts - 1 and done >= total * (len(runs) + 1) / parts:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


class EmbeddingShards:
    """Read-only view of the shards as one (n, d) fp16 matrix, memory-mapped: opening reads no vectors."""

    def __init__(self, paths: Sequence[Path]) -> None:
        if not paths:
            raise ValueError("no embedding shards given")
        self.paths = list(paths)
        self.parts = [np.load(p, mmap_mode="r") for p in self.paths]
        dims = {int(p.shape[1]) for p in self.parts}
        if len(dims) != 1:
            raise ValueError(f"shards of different dimensions {sorted(dims)} in {self.paths[0].parent}")
        self.dimension = dims.pop()
        sizes = np.array([p.shape[0] for p in self.parts], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)])
        for part in self.parts:
            # Candidates are scattered rows: read-ahead would pull in pages nobody asked for.
            mapping = getattr(part, "_mmap", None)
            if mapping is not None and hasattr(mmap, "MADV_RANDOM"):
                mapping.madvise(mmap.MADV_RANDOM)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def nbytes(self) -> int:
        return len(self) * self.dimension * 2

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """float32 vectors of the given global rows (any shape; -1 gives a zero vector)."""
        flat = np.asarray(ids, dtype=np.int64).reshape(-1)
        out = np.zeros((flat.size, self.dimension), dtype=np.float32)
        valid = np.flatnonzero(flat >= 0)
        if valid.size:
            wanted = flat[valid]
            order = np.argsort(wanted, kind="stable")
            # Sorted reads walk each shard front to back: neighbouring candidates share pages.
            shard_of = np.searchsorted(self.offsets, wanted[order], side="right") - 1
            for shard in np.unique(shard_of):
                sel = order[shard_of == shard]
                out[valid[sel]] = self.parts[shard][wanted[sel] - self.offsets[shard]]
        return out.reshape(*np.shape(ids), self.dimension)

    def slice(self, start: int, end: int) -> list[np.ndarray]:
        """The rows [start, end) as a list of memory-mapped pieces (one per shard touched), in order."""
        pieces = []
        for shard, part in enumerate(self.parts):
            lo, hi = int(self.offsets[shard]), int(self.offsets[shard + 1])
            a, b = max(start, lo), min(end, hi)
            if a < b:
                pieces.append(part[a - lo : b - lo])
        return pieces
