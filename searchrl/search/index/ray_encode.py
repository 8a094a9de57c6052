"""Encode an index build's unfinished embedding shards on a Ray cluster, with Ray Data.

A dataset of shard numbers runs through a fixed pool of actors, each loading the encoder once; an actor encodes
whole shards with the function every build encodes with (`build.shard_encoder`) and writes each one (temp name,
then rename) when it is done. So a shard's bytes do not depend on where it was encoded, and a killed build resumes
from the shards that were finished. Every worker must see the index directory: on a cluster of several machines, a
shared filesystem.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.data import ActorPoolStrategy, DataContext

log = logging.getLogger("searchrl.search.index.ray_encode")

# A CPU build's pool when --ray-workers is not given (a GPU build's is the cluster's GPUs).
DEFAULT_CPU_WORKERS = 2

ShardEncoder = Callable[[int, Callable[[int], None]], int]
Loader = Callable[..., ShardEncoder]

__all__ = ["encode_on_ray"]


class _EncodeShards:
    """One actor of the pool: the encoder, loaded once, and a row (one shard number) at a time."""

    def __init__(self, load: Loader, device: str) -> None:
        started = time.perf_counter()
        self.encode = load(device=device)
        self.load_seconds = time.perf_counter() - started

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        shard = int(row["shard"])
        passages = self.encode(shard, lambda _n: None)
        return {
            "shard": shard,
            "passages": passages,
            "seconds": time.perf_counter() - started,
            "load_seconds": self.load_seconds,
        }


def encode_on_ray(
    address: str, workers: int | None, shards: list[int], load: Loader, on_gpu: bool, progress: Callable[[int], None]
) -> float:
    """Encode `shards` on the Ray cluster at `address` (`auto`, host:port, or `local`: one started here, sized by
    `workers`, and shut down after) with a pool of `workers` actors, one GPU each when `on_gpu`, else one CPU.
    `load(device=...)` loads the encoder in an actor and returns its per-shard function; `progress(n)` is called
    with each finished shard's passage count. Returns the slowest model load time. An existing connection of this
    process to Ray is used as it is, and left open."""
    connected_here = not ray.is_initialized()
    if connected_here:
        _connect(address, workers, on_gpu)
    try:
        size = _pool_size(workers, on_gpu)
        log.info("encoding %d shards on %d Ray workers (%s)", len(shards), size, "one GPU each" if on_gpu else "CPU")
        return _run(shards, load, on_gpu, size, progress)
    finally:
        if connected_here:
            ray.shutdown()


def _connect(address: str, workers: int | None, on_gpu: bool) -> None:
    if address != "local":
        ray.init(address=address, logging_level=logging.WARNING)
        return
    # `local` always starts a cluster of this build's own (plain `ray.init()` would join one already running on
    # this machine): a CPU pool gets a core per worker; a GPU pool sees the machine's GPUs.
    ray.init(
        address="local",
        num_cpus=None if on_gpu else workers or DEFAULT_CPU_WORKERS,
        include_dashboard=False,
        logging_level=logging.WARNING,
    )


def _pool_size(workers: int | None, on_gpu: bool) -> int:
    resource = "GPU" if on_gpu else "CPU"
    have = int(ray.cluster_resources().get(resource, 0))
    size = workers or (have if on_gpu else DEFAULT_CPU_WORKERS)
    if not 1 <= size <= have:
        # A fixed pool waits for all its actors: one the cluster cannot place would hang the build, not fail it.
        raise RuntimeError(
            f"--ray-workers {size}: the Ray cluster has {have} {resource}s, and each worker takes one; "
            "give fewer workers, or a cluster with more"
        )
    return size


def _run(shards: list[int], load: Loader, on_gpu: bool, size: int, progress: Callable[[int], None]) -> float:
    # The build's own bar and the per-shard lines below report progress; Ray Data's bars would interleave with them.
    DataContext.get_current().enable_progress_bars = False
    # One block per shard, and one shard in flight per actor: a worker that finishes early takes the next shard,
    # rather than shards queued behind a busy one.
    dataset = ray.data.from_items([{"shard": s} for s in shards], override_num_blocks=len(shards))
    encoded = dataset.map(
        _EncodeShards,
        fn_constructor_kwargs={"load": load, "device": "cuda:0" if on_gpu else "cpu"},
        compute=ActorPoolStrategy(size=size, max_tasks_in_flight_per_actor=1),
        **({"num_gpus": 1} if on_gpu else {"num_cpus": 1}),
    )
    load_s = 0.0
    try:
        for done, row in enumerate(encoded.iter_rows(), 1):
            progress(int(row["passages"]))
            load_s = max(load_s, float(row["load_seconds"]))
            log.info("encoded shard %d: %d passages in %.1f s (%d of %d)", row["shard"], row["passages"],
                     row["seconds"], done, len(shards))  # fmt: skip
    except ray.exceptions.RayError as exc:
        raise RuntimeError(f"encoding on Ray failed: {exc}; finished shards are kept, re-run to resume") from exc
    return load_s
