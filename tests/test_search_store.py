import time

import numpy as np
import pytest

from searchrl.search.index.corpus import Record
from searchrl.search.index.faiss_import import faiss
from searchrl.search.index.faiss_index import build_faiss_index, effective_factory
from searchrl.search.index.store import PassageStore, StoreError, write_store


def test_round_trip_unicode_and_empty_fields(tmp_path):
    rows = [Record("a1", "Zürich", "Café ☕ text"), Record("b2", "", "no title"), Record("c3", "T", "")]
    assert write_store(iter(rows), tmp_path / "s") == 3
    store = PassageStore(tmp_path / "s")
    assert len(store) == 3
    assert [store[i] for i in range(3)] == rows
    assert store.text(0) == "Café ☕ text" and store.title(1) == ""
    with pytest.raises(IndexError):
        store[3]


def test_store_is_memory_mapped_and_opens_fast(tmp_path):
    n = 50_000
    write_store((Record(str(i), f"title {i}", f"text number {i} " * 5) for i in range(n)), tmp_path / "s")
    started = time.perf_counter()
    store = PassageStore(tmp_path / "s")
    assert time.perf_counter() - started < 0.5
    assert isinstance(store._offsets, np.memmap)
    assert all(isinstance(blob, np.memmap) for blob in store._blobs)
    assert store[n - 1] == Record(str(n - 1), f"title {n - 1}", f"text number {n - 1} " * 5)
    assert not list(tmp_path.glob("*.tmp"))


def test_truncated_blob_is_named(tmp_path):
    write_store(iter([Record("1", "t", "some text")]), tmp_path / "s")
    blob = tmp_path / "s" / "texts.bin"
    blob.write_bytes(blob.read_bytes()[:-2])
    with pytest.raises(StoreError, match="texts.bin"):
        PassageStore(tmp_path / "s")


def test_ivf_nlist_clamped_for_small_corpora():
    assert effective_factory("IVF4096,SQ8", 7137) == "IVF183,SQ8"
    assert effective_factory("IVF4096,PQ64", 10_000_000) == "IVF4096,PQ64"
    assert effective_factory("OPQ64,IVF4096,PQ64", 100) == "OPQ64,IVF2,PQ64"
    assert effective_factory("IVF4096,Flat", 5) == "IVF1,Flat"
    assert effective_factory("HNSW32", 10) == "HNSW32"


def test_ivf_training_is_deterministic(tmp_path):
    rng = np.random.default_rng(0)
    shards = []
    for i in range(3):
        vectors = rng.standard_normal((700, 32)).astype(np.float16)
        shards.append(tmp_path / f"shard_{i:05d}.npy")
        np.save(shards[-1], vectors)
    factory = effective_factory("IVF4096,SQ8", 2100)
    first = faiss.serialize_index(build_faiss_index(shards, 32, factory, train_size=1000))
    second = faiss.serialize_index(build_faiss_index(shards, 32, factory, train_size=1000))
    assert factory == "IVF53,SQ8"
    assert np.array_equal(first, second)
