"""Hybrid retrieval: BM25 and dense rankings over the same index directory, fused by reciprocal rank.

A passage's fused score is the sum over rankings of weight / (rrf_k + rank) (rank 1 = best), over each
ranking's top `depth`. Rank fusion needs no score calibration between a cosine and a BM25 score, and a
passage both rankings place high beats one that only one of them likes.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from searchrl.search.base import BackendTraits, Passage
from searchrl.search.bm25 import BM25Backend
from searchrl.search.index.layout import index_dir_identity
from searchrl.search.index_settings import HybridConfig
from searchrl.search.local_faiss import LocalFaissBackend

if TYPE_CHECKING:
    from searchrl.search.settings import SearchConfig


def rrf_fuse(
    rankings: list[np.ndarray], weights: list[float], rrf_k: float, top_k: int
) -> list[list[tuple[int, float]]]:
    """Fuse row rankings (each (n_queries, depth), -1 = none) into top_k (row, fused score) lists per query.

    Equal fused scores go to the row the first ranking placed higher, then to the lower row number.
    """
    fused: list[list[tuple[int, float]]] = []
    for q in range(rankings[0].shape[0]):
        scores: dict[int, float] = {}
        first_rank: dict[int, int] = {}
        for which, (ranking, weight) in enumerate(zip(rankings, weights, strict=True)):
            for rank, row in enumerate(ranking[q].tolist(), start=1):
                if row < 0:
                    continue
                scores[row] = scores.get(row, 0.0) + weight / (rrf_k + rank)
                if which == 0:
                    first_rank[row] = rank
        best = sorted(scores, key=lambda r: (-scores[r], first_rank.get(r, 1 << 30), r))[:top_k]
        fused.append([(row, scores[row]) for row in best])
    return fused


class HybridBackend(BackendTraits):
    """Dense (the directory's index type) + BM25 over one index directory, one store, fused by RRF."""

    retriever = "hybrid"

    def __init__(self, dense: LocalFaissBackend, bm25: BM25Backend, config: HybridConfig | None = None) -> None:
        if dense.manifest["corpus"]["sha256"] != bm25.manifest["corpus"]["sha256"]:
            raise ValueError("hybrid: the dense and BM25 indexes were built from different corpora")
        self.dense = dense
        self.bm25 = bm25
        self.config = config or HybridConfig()
        self.manifest = dense.manifest
        # The fusion settings change every answer: they are part of the version that keys result caches.
        settings = hashlib.sha256(self.config.model_dump_json().encode()).hexdigest()[:8]
        self.version = f"{dense.version}-hybrid-{settings}"
        self.store = dense.store

    @classmethod
    def identity(cls, config: Any) -> dict[str, Any]:
        options = {"nprobe": config.nprobe, "hybrid": config.hybrid.model_dump()}
        return {"backend": config.backend, "index": index_dir_identity(config.index_dir), "options": options}

    @classmethod
    def from_config(cls, config: SearchConfig) -> HybridBackend:
        if config.index_dir is None:
            raise ValueError("index_dir: required for the hybrid backend")
        dense = LocalFaissBackend.from_config(config)
        return cls(dense, BM25Backend(Path(config.index_dir)), config.hybrid)

    def search_sync(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if not queries:
            return []
        depth = max(top_k, self.config.depth)
        _, dense_rows = self.dense.search_rows(queries, depth)
        _, bm25_rows = self.bm25.search_rows(queries, depth)
        fused = rrf_fuse(
            [dense_rows, bm25_rows], [self.config.dense_weight, self.config.bm25_weight], self.config.rrf_k, top_k
        )
        out = []
        for hits in fused:
            line = []
            for row, score in hits:
                record = self.store[row]
                line.append(Passage(id=record.id, title=record.title, text=record.text, score=score))
            out.append(line)
        return out

    async def search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        return await asyncio.to_thread(self.search_sync, queries, top_k)

    async def aclose(self) -> None:
        return None
