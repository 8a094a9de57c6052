"""BM25, hybrid and the shard-backed index types, built over the fixture index's own shards and served."""

from __future__ import annotations

import functools
import json
import shutil

import httpx
import numpy as np
import pytest

from search_backend.serve.app import ServerConfig, create_app
from searchrl.search.backends import SearchConfig, open_backend
from searchrl.search.bm25 import BM25Backend
from searchrl.search.hybrid import HybridBackend, rrf_fuse
from searchrl.search.index.build import build
from searchrl.search.index.layout import IndexValidationError
from searchrl.search.index_settings import HybridConfig
from searchrl.search.local_faiss import LocalFaissBackend
from tests.conftest import serve as running_server
from tests.test_search_fixtures import build_kwargs, fixture_backend, fixture_index, fixture_queries, scratch_dir

# Measured on the 59 fixture queries (MiniLM): dense 0.97, BM25 0.93, hybrid 0.97.
BM25_RECALL_AT_5_FLOOR = 0.8
HYBRID_RECALL_AT_5_FLOOR = 0.85


@functools.cache
def rebuilt(index_type: str, bm25: bool = False, bm25_flavour: str = "bm25s"):
    """The fixture index rebuilt as another type: the store and shards are reused, nothing is re-encoded."""
    out = scratch_dir(f"searchrl-{index_type}-") / "index"
    shutil.copytree(fixture_index(), out, ignore=shutil.ignore_patterns("manifest.json", "index.*"))
    build(out=out, **build_kwargs() | {"factory": None}, index_type=index_type, bm25=bm25, bm25_flavour=bm25_flavour)
    return out


def dense(index_dir, **kw) -> LocalFaissBackend:
    return LocalFaissBackend(index_dir, encoder=fixture_backend().encoder, **kw)


def recall_at_5(results) -> float:
    queries = fixture_queries()
    found = [q["ranked_ids"][0] in [p.id for p in hits[:5]] for q, hits in zip(queries, results, strict=True)]
    return float(np.mean(found))


def texts() -> list[str]:
    return [q["query"] for q in fixture_queries()]


def test_rrf_fuse_weights_and_ties():
    a = np.array([[5, 7, 9, -1]])
    b = np.array([[9, 5, -1, -1]])
    fused = rrf_fuse([a, b], [1.0, 1.0], 60, 3)[0]
    assert [row for row, _ in fused] == [5, 9, 7]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)
    assert [row for row, _ in rrf_fuse([a, b], [1.0, 0.0], 60, 3)[0]] == [5, 7, 9]
    # Equal fused scores: the first ranking's order decides.
    assert [row for row, _ in rrf_fuse([np.array([[1, 2]]), np.array([[2, 1]])], [1, 1], 60, 2)[0]] == [1, 2]


def test_bm25_is_saved_beside_the_index_without_pickle():
    out = rebuilt("faiss", bm25=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["files"]["bm25"] == "bm25" and manifest["bm25"]["library"] == "bm25s"
    files = sorted(p.name for p in (out / "bm25").iterdir())
    assert files and all(name.endswith((".npy", ".json")) for name in files)
    for path in (out / "bm25").glob("*.npy"):
        np.load(path, allow_pickle=False)


def test_bm25_and_hybrid_find_r1_searchers_top1():
    out = rebuilt("faiss", bm25=True)
    lexical = BM25Backend(out)
    assert recall_at_5(lexical.search_sync(texts(), 5)) >= BM25_RECALL_AT_5_FLOOR
    hybrid = HybridBackend(dense(out), lexical, HybridConfig())
    results = hybrid.search_sync(texts(), 5)
    assert all(len(hits) == 5 for hits in results)
    assert all(hits[0].score >= hits[-1].score for hits in results)
    assert recall_at_5(results) >= HYBRID_RECALL_AT_5_FLOOR
    # Zero BM25 weight leaves the dense ranking.
    only_dense = HybridBackend(dense(out), lexical, HybridConfig(bm25_weight=0.0)).search_sync(texts()[:10], 5)
    assert [[p.id for p in h] for h in only_dense] == [
        [p.id for p in h] for h in dense(out).search_sync(texts()[:10], 5)
    ]


def test_bm25_needs_its_index():
    with pytest.raises(IndexValidationError, match="--bm25"):
        BM25Backend(fixture_index())


@pytest.mark.parametrize("index_type", ["compact", "exact"])
def test_shard_backed_types_rank_like_flat(index_type):
    out = rebuilt(index_type, bm25=index_type == "compact")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["index_type"] == index_type and manifest["files"]["embeddings_required"]
    got = dense(out).search_sync(texts(), 5)
    flat = fixture_backend().search_sync(texts(), 5)
    same_top1 = np.mean([g[0].id == f[0].id for g, f in zip(got, flat, strict=True)])
    assert same_top1 == 1.0
    if index_type == "exact":
        assert [[p.id for p in h] for h in got] == [[p.id for p in h] for h in flat]


def test_shard_backed_type_without_its_shards_is_refused(tmp_path):
    copy = tmp_path / "index"
    shutil.copytree(rebuilt("compact", bm25=True), copy)
    (copy / "embeddings" / "shard_00001.npy").unlink()
    with pytest.raises(IndexValidationError, match="shard_00001"):
        dense(copy)


def test_server_serves_hybrid_and_reports_the_index_type():
    out = rebuilt("compact", bm25=True)
    config = ServerConfig(index_dir=out, backend="hybrid", cache_size=0, hybrid=HybridConfig(bm25_weight=0.5))
    with running_server(create_app(config)) as url:
        health = httpx.get(f"{url}/health", timeout=30).json()
        response = httpx.post(f"{url}/search", json={"queries": texts()[:3], "top_k": 3}, timeout=60)
    assert health["retriever"] == "hybrid" and health["index_type"] == "compact"
    assert response.status_code == 200
    expected = open_backend(SearchConfig(backend="hybrid", index_dir=out, hybrid=HybridConfig(bm25_weight=0.5)))
    want = expected.search_sync(texts()[:3], 3)
    assert [[r["id"] for r in hits] for hits in response.json()["results"]] == [[p.id for p in h] for h in want]
