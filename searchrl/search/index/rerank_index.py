"""The `compact` index type: a compressed FAISS index proposes candidates, the fp16 shards re-score them.

PQ codes keep ~1/30 of Flat's bytes in RAM but rank approximately; re-scoring the top `depth` candidates
with their exact fp16 vectors (read from the memory-mapped shards, a few hundred rows per query) restores
Flat's order among them, so the result differs from Flat only when Flat's answer is not among the candidates.
"""

from __future__ import annotations

import numpy as np

from searchrl.search.index.faiss_import import faiss
from searchrl.search.index.index_types import top_k
from searchrl.search.index.shards import EmbeddingShards

QUERY_BLOCK = 64


class RerankIndex:
    def __init__(self, index: faiss.Index, shards: EmbeddingShards, depth: int) -> None:
        if index.ntotal != len(shards):
            raise ValueError(f"index holds {index.ntotal} vectors but the shards hold {len(shards)}")
        if depth < 1:
            raise ValueError(f"rerank depth must be >= 1, got {depth}")
        self.index = index
        self.shards = shards
        self.depth = depth
        self.ntotal = int(index.ntotal)
        self.d = int(index.d)

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(vectors, dtype=np.float32)
        _, candidates = self.index.search(queries, max(k, self.depth))
        scores, rows = [], []
        # Blocks of queries bound the gathered vectors (block x depth x d floats) whatever the batch size.
        for lo in range(0, len(queries), QUERY_BLOCK):
            cand = candidates[lo : lo + QUERY_BLOCK]
            exact = np.einsum("qcd,qd->qc", self.shards.rows(cand), queries[lo : lo + QUERY_BLOCK])
            exact[cand < 0] = -np.inf
            block_scores, block_rows = top_k(exact, cand, k)
            scores.append(block_scores)
            rows.append(block_rows)
        if not scores:
            return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
        return np.concatenate(scores), np.concatenate(rows)
