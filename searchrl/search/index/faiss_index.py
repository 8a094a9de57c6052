"""FAISS index construction from embedding shards: factory clamping, deterministic training, GPU when present."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from searchrl.search.index.faiss_import import faiss

log = logging.getLogger(__name__)

# FAISS warns below 39 training points per centroid; fewer lists than that gives poorly trained centroids.
MIN_POINTS_PER_CENTROID = 39
_IVF = re.compile(r"IVF(\d+)")


def effective_factory(factory: str, n_vectors: int) -> str:
    """The factory string with IVF's nlist clamped to what `n_vectors` can train (at least 1)."""
    match = _IVF.search(factory)
    if not match:
        return factory
    nlist = max(1, min(int(match.group(1)), n_vectors // MIN_POINTS_PER_CENTROID))
    return factory[: match.start()] + f"IVF{nlist}" + factory[match.end() :]


def gpu_count() -> int:
    get = getattr(faiss, "get_num_gpus", None)
    return int(get()) if get else 0


def shard_rows(shards: Sequence[Path]) -> list[int]:
    return [int(np.load(p, mmap_mode="r").shape[0]) for p in shards]


def training_sample(shards: Sequence[Path], train_size: int) -> np.ndarray:
    """Evenly spaced rows across all shards: the same rows on every run, so training is reproducible."""
    sizes = shard_rows(shards)
    total = sum(sizes)
    wanted = np.unique(np.linspace(0, total - 1, num=min(total, train_size)).astype(np.int64))
    parts, start = [], 0
    for path, size in zip(shards, sizes, strict=True):
        local = wanted[(wanted >= start) & (wanted < start + size)] - start
        if local.size:
            parts.append(np.asarray(np.load(path, mmap_mode="r")[local], dtype=np.float32))
        start += size
    return np.ascontiguousarray(np.concatenate(parts))


def build_faiss_index(
    shards: Sequence[Path],
    dimension: int,
    factory: str,
    device: str = "cpu",
    train_size: int = 1_000_000,
    timings: dict[str, float] | None = None,
) -> faiss.Index:
    """An inner-product index over the shards (in order, so row i of the corpus is FAISS id i).

    `timings`, when given, receives train_seconds and add_seconds.
    """
    index = faiss.index_factory(dimension, factory, faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.try_extract_index_ivf(index)
    ivf = faiss.downcast_index(ivf) if ivf is not None else None
    if isinstance(ivf, faiss.IndexIVFPQ):
        # Polysemous training only serves Hamming-filtered search, which is never used here, and it dominates
        # PQ training time (minutes even on 7k vectors).
        ivf.do_polysemous_training = False
    target = index
    if device == "cuda" and gpu_count() > 0:
        try:
            target = faiss.index_cpu_to_all_gpus(index)
        except (RuntimeError, AttributeError) as exc:
            log.warning("index %s cannot run on GPU (%s); building on CPU", factory, exc)
            target = index
    started = time.perf_counter()
    if not target.is_trained:
        sample = training_sample(shards, train_size)
        log.info("training %s on %d vectors", factory, len(sample))
        if ivf is not None:
            # k-means over a large sample runs for minutes on a CPU: its per-iteration lines are the progress.
            ivf.cp.verbose = log.isEnabledFor(logging.INFO)
        target.train(sample)
    trained = time.perf_counter()
    for path in tqdm(shards, desc="index add", unit=" shards", dynamic_ncols=True, disable=len(shards) < 2):
        target.add(np.ascontiguousarray(np.load(path), dtype=np.float32))
    if timings is not None:
        timings.update(train_seconds=trained - started, add_seconds=time.perf_counter() - trained)
    return faiss.index_gpu_to_cpu(target) if target is not index else index


def write_index_atomic(index: faiss.Index, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    faiss.write_index(index, str(tmp))
    os.replace(tmp, path)


def set_search_params(index: faiss.Index, nprobe: int | None, ef_search: int | None, on_gpu: bool) -> None:
    """Apply nprobe / efSearch where the index has them (through wrappers like IndexPreTransform)."""
    space = faiss.GpuParameterSpace() if on_gpu else faiss.ParameterSpace()
    for name, value in (("nprobe", nprobe), ("efSearch", ef_search)):
        if value is None:
            continue
        try:
            space.set_index_parameter(index, name, value)
        except RuntimeError:
            log.debug("index has no %s parameter", name)
