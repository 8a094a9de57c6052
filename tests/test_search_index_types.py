"""Index types on tiny synthetic vectors: the compact type's re-scoring, the exact type's device split."""

from __future__ import annotations

import numpy as np
import pytest

from searchrl.search.index import torch_exact
from searchrl.search.index.faiss_index import build_faiss_index
from searchrl.search.index.index_types import compact_factory, default_factory, top_k
from searchrl.search.index.rerank_index import RerankIndex
from searchrl.search.index.shards import EmbeddingShards, split_ranges, write_shard
from searchrl.search.index.torch_exact import ShardedExactIndex, device_slices

DIM = 32


@pytest.fixture(autouse=True, scope="module")
def one_faiss_thread():
    # k-means on 3,000 points is faster on one thread than on two busy cores (OpenMP spins while it waits).
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def clustered(n: int, seed: int) -> np.ndarray:
    """Unit vectors around 20 centres: nearest neighbours are close calls, as with real embeddings."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, DIM))
    x = centres[rng.integers(0, 20, n)] + 0.6 * rng.standard_normal((n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    vectors = clustered(3000, seed=0).astype(np.float16)
    # Uneven shards, so row look-ups and device slices cross shard borders.
    cuts = [0, 700, 1900, 3000]
    paths = []
    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
        paths.append(folder / f"shard_{i:05d}.npy")
        write_shard(paths[-1], vectors[a:b])
    return paths, vectors.astype(np.float32)


def exact_search(vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = queries @ vectors.T
    return top_k(scores, np.broadcast_to(np.arange(len(vectors)), scores.shape).copy(), k)


def test_split_ranges_are_contiguous_disjoint_and_cover_everything():
    items = list(range(3, 20))
    weights = [5] * 16 + [2]
    for parts in (1, 2, 3, 5, 17, 40):
        runs = split_ranges(items, weights, parts)
        assert [i for run in runs for i in run] == items
        assert all(run for run in runs) and len(runs) == min(parts, len(items))
        assert all(run == list(range(run[0], run[-1] + 1)) for run in runs)
    shares = [sum(weights[items.index(i)] for i in run) for run in split_ranges(items, weights, 4)]
    assert max(shares) - min(shares) <= 10
    with pytest.raises(ValueError):
        split_ranges(items, weights, 0)


def test_device_slices_cover_rows_once():
    for n, d in ((10, 3), (2, 4), (0, 2), (1000, 8)):
        slices = device_slices(n, d)
        assert len(slices) == d and slices[0][0] == 0 and slices[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(slices[:-1], slices[1:], strict=True))


def test_shard_rows_gather_across_shards(shards):
    paths, vectors = shards
    view = EmbeddingShards(paths)
    assert len(view) == 3000 and view.dimension == DIM
    ids = np.array([[2999, 0, 700], [699, -1, 1900]])
    got = view.rows(ids)
    assert got.shape == (2, 3, DIM)
    assert np.array_equal(got[0, 0], vectors[2999]) and np.array_equal(got[1, 2], vectors[1900])
    assert not got[1, 1].any()


def test_compact_type_rescored_top10_matches_exact(shards):
    paths, vectors = shards
    queries = clustered(200, seed=1)
    index = build_faiss_index(paths, DIM, "IVF16,PQ8")
    index.nprobe = 16
    compact = RerankIndex(index, EmbeddingShards(paths), depth=50)
    scores, rows = compact.search(queries, 10)
    want_scores, want_rows = exact_search(vectors, queries, 10)
    recall = np.mean([want_rows[i, 0] in rows[i] for i in range(len(queries))])
    assert recall >= 0.99
    # Re-scored: the scores are the exact inner products of the rows returned, not PQ estimates.
    assert np.allclose(scores, np.einsum("qkd,qd->qk", vectors[rows], queries), atol=1e-5)
    # PQ alone ranks approximately; the re-scoring is what makes the top-1 exact.
    _, pq_rows = index.search(queries, 10)
    assert np.mean(rows[:, 0] == want_rows[:, 0]) > np.mean(pq_rows[:, 0] == want_rows[:, 0])


@pytest.mark.parametrize("devices", [["cpu"], ["cpu", "cpu", "cpu"]])
@pytest.mark.parametrize("resident", [False, True])
def test_exact_type_split_across_devices_equals_exact_search(shards, devices, resident, monkeypatch):
    paths, vectors = shards
    # Small row blocks, so the resident path's per-block top-k and merge run several times per device.
    monkeypatch.setattr(torch_exact, "GPU_BLOCK_ROWS", 257)
    # Queries near stored rows: clear winners, so fp16 products (the resident, GPU code path) rank alike.
    rng = np.random.default_rng(2)
    queries = vectors[rng.integers(0, 3000, 64)] + 0.01 * rng.standard_normal((64, DIM)).astype(np.float32)
    index = ShardedExactIndex(EmbeddingShards(paths), devices, resident=resident)
    scores, rows = index.search(queries, 10)
    want_scores, want_rows = exact_search(vectors, queries, 10)
    assert np.array_equal(rows[:, 0], want_rows[:, 0])
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rows, want_rows, strict=True)]) >= 0.98
    assert np.allclose(scores, want_scores, atol=1e-2 if resident else 1e-5)


def test_exact_type_pads_when_k_exceeds_a_device_slice(shards):
    paths, vectors = shards
    index = ShardedExactIndex(EmbeddingShards(paths[:1]), ["cpu"] * 8)
    scores, rows = index.search(vectors[:3], 700)
    assert rows.shape == (3, 700) and sorted(rows[0].tolist()) == list(range(700))
    _, more = index.search(vectors[:1], 710)
    assert (more[0, 700:] == -1).all()


def test_top_k_orders_ties_by_row_and_pads():
    scores, rows = top_k(np.array([[1.0, 3.0, 3.0]], np.float32), np.array([[7, 9, 4]]), 4)
    assert rows.tolist() == [[4, 9, 7, -1]] and scores[0, 3] == -np.inf


def test_default_factories():
    assert default_factory("faiss", 384, 10**6) == "Flat"
    assert default_factory("exact", 1024, 10**6) is None
    assert compact_factory(1024, 25_000_000) == "IVF4096,PQ128"
    assert compact_factory(384, 7137) == "IVF4096,PQ48x7"
    assert compact_factory(384, 200) == "IVF4096,PQ48x2"
