"""Index types: what answers a batch of query vectors with (scores, rows), and how each type is configured.

- `faiss`: any FAISS factory string (Flat, HNSW32, IVF4096,SQ8, ...), held in RAM or moved to GPUs.
- `compact`: a compressed FAISS index (IVF-PQ) whose top candidates are re-scored exactly from the
  memory-mapped fp16 embedding shards: a few dozen bytes per vector in RAM at Flat's ranking.
- `exact`: exact inner product over the fp16 shards with torch, the rows split across the given devices
  (every visible GPU; no faiss-gpu needed). On CPU it streams the memory-mapped shards.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

COMPACT_NLIST = 4096
# FAISS's k-means wants 39 training points per centroid; a PQ sub-quantizer of b bits has 2**b centroids.
MIN_POINTS_PER_CENTROID = 39


class VectorIndex(Protocol):
    ntotal: int

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """float32 scores and int64 rows, (n_queries, k) each, best first; row -1 pads a short list."""
        ...


def compact_code_size(dimension: int) -> int:
    """PQ bytes per vector: one per 8 dimensions (dividing the dimension), so 48 at 384 and 128 at 1024."""
    m = max(1, dimension // 8)
    while dimension % m:
        m -= 1
    return m


def compact_factory(dimension: int, n_vectors: int) -> str:
    """IVF lists (clamped later to what n can train) over PQ codes of 8 bits; smaller corpora get fewer PQ bits,
    so each sub-quantizer still has 39 training points per centroid. No OPQ rotation: the exact re-scoring
    already recovers the order PQ loses, and FAISS's OPQ training took minutes on 1,000 vectors here (and
    crashed on 600)."""
    m = compact_code_size(dimension)
    bits = max(1, min(8, int(math.log2(max(2, n_vectors // MIN_POINTS_PER_CENTROID)))))
    return f"IVF{COMPACT_NLIST},PQ{m}" if bits == 8 else f"IVF{COMPACT_NLIST},PQ{m}x{bits}"


@dataclass(frozen=True)
class IndexType:
    """What the code around an index asks of its type, so that none of it switches on a type's name."""

    name: str
    # Takes a FAISS factory string (and holds a FAISS index); `exact` has none.
    has_factory: bool
    # Reads the embedding shards at search time: they must stay beside the index.
    reads_shards: bool
    # Re-scores a FAISS index's candidates exactly from the shards (`compact`).
    reranks: bool
    # The exact (type, factory) kept when no search setting of an approximate index reaches the recall target.
    exact_fallback: tuple[str, str | None]
    # The factory a build uses when none is given, from (dimension, vectors).
    default: Callable[[int, int], str | None]

    def approximate(self, factory: str | None) -> bool:
        """Whether it can miss part of the exact top-10: re-scored candidates always can; a FAISS factory other than
        Flat can; exact inner product cannot."""
        if not self.has_factory:
            return False
        return self.reranks or (factory is not None and factory != "Flat")


KINDS: dict[str, IndexType] = {
    "faiss": IndexType("faiss", True, False, False, ("faiss", "Flat"), lambda dimension, n: "Flat"),
    "compact": IndexType("compact", True, True, True, ("exact", None), compact_factory),
    "exact": IndexType("exact", False, True, False, ("exact", None), lambda dimension, n: None),
}
INDEX_TYPES: tuple[str, ...] = tuple(KINDS)


def kind_of(name: str) -> IndexType:
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"index type {name!r} unknown; known: {list(INDEX_TYPES)}") from None


def default_factory(name: str, dimension: int, n_vectors: int) -> str | None:
    return kind_of(name).default(dimension, n_vectors)


def top_k(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best (score, row) pairs of each line, best first; lines shorter than k are padded (-inf, -1)."""
    n, width = scores.shape
    if width < k:
        scores = np.concatenate([scores, np.full((n, k - width), -np.inf, dtype=scores.dtype)], axis=1)
        rows = np.concatenate([rows, np.full((n, k - width), -1, dtype=rows.dtype)], axis=1)
        width = k
    if width > k:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        scores = np.take_along_axis(scores, part, axis=1)
        rows = np.take_along_axis(rows, part, axis=1)
    # Ties are broken by row so that every type (and every device split) orders equal scores alike.
    order = np.lexsort((rows, -scores), axis=1)
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(rows, order, axis=1)
