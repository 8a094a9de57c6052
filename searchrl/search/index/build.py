"""Build a search index directory from a corpus: passage store, fp16 embedding shards, vector index, BM25, manifest.

The manifest is removed before anything else changes and written back last, so a directory is usable exactly
when its manifest names what is in it. Every step leaves finished files under their final names only (temp
name, then os.replace) beside a record of its inputs (the corpus sha256 among them): a re-run keeps what a
crashed run finished, redoes what was made from other inputs, and gives the same index as a clean build.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import logging
import math
import multiprocessing as mp
import queue
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
from tqdm import tqdm

from searchrl.search.bm25 import build_bm25
from searchrl.search.encode.encoder import Encoder, passage_text
from searchrl.search.encode.onnx_encoder import BACKENDS
from searchrl.search.encode.profiles import DEFAULT_MODEL, PRODUCTION_MODEL, PROFILES, profile_for
from searchrl.search.index.corpus import FORMATS, CorpusReport, Record, TooManyBadLines, file_sha256, read_corpus
from searchrl.search.index.index_types import INDEX_TYPES, default_factory, kind_of
from searchrl.search.index.layout import (
    BM25_DIR,
    EMBED_DIR,
    EMBED_INFO,
    INDEX_FILE,
    INDEX_INFO,
    MANIFEST,
    MANIFEST_VERSION,
    STORE_DIR,
    STORE_INFO,
    read_json,
    remove_durably,
    write_json_atomic,
)
from searchrl.search.index.shards import EmbeddingShards, shard_path, shard_paths, split_ranges, write_shard
from searchrl.search.index.store import PassageStore, write_store

log = logging.getLogger("searchrl.search.index.build")

CPU_BATCH, GPU_BATCH = 64, 512

__all__ = ["BuildError", "build", "main", "resolve_devices"]


class BuildError(ValueError):
    """The build's arguments cannot work together; the message names the option and the fix."""


def resolve_devices(device: str) -> list[str]:
    """`cpu`, `cuda` (every visible GPU), or a comma list such as `cuda:0,cuda:2` (`cpu,cpu`: two CPU workers)."""
    names = [d.strip() for d in device.split(",") if d.strip()]
    if not names:
        raise BuildError("device: empty")
    for name in names:
        if name not in ("cpu", "cuda") and not (name.startswith("cuda:") and name[5:].isdigit()):
            raise BuildError(f"device: {name!r} is not cpu, cuda or cuda:N")
    if names == ["cuda"]:
        import torch

        count = torch.cuda.device_count()
        if count == 0:
            raise BuildError("device: cuda asked for, but torch sees no GPU (check CUDA_VISIBLE_DEVICES, the driver)")
        return [f"cuda:{i}" for i in range(count)]
    if "cuda" in names:
        raise BuildError("device: bare cuda cannot be mixed with other devices; name them as cuda:N")
    return names


def build_store(
    corpus: Path, fmt: str, out: Path, checksum: str, max_bad_lines: int | None, max_bad_fraction: float | None
) -> dict:
    info = {"corpus_sha256": checksum, "format": fmt}
    done = read_json(out / STORE_INFO)
    if done and all(done.get(k) == v for k, v in info.items()) and (out / STORE_DIR).is_dir():
        log.info("passage store already built (%d passages), reusing it", done["passages"])
        return done
    remove_durably(out / STORE_INFO)
    report = CorpusReport()

    def checked() -> Iterator[Record]:
        yield from read_corpus(corpus, fmt, report)
        # Raising inside the stream stops write_store before it renames the half-done store into place.
        report.check(max_bad_lines, max_bad_fraction)

    bar = tqdm(checked(), desc="store", unit=" passages", dynamic_ncols=True)
    count = write_store(bar, out / STORE_DIR)
    bar.close()
    if report.bad:
        log.warning("corpus %s: %s", corpus, report.summary())
    info.update(
        passages=count,
        lines=report.lines,
        bad_lines=report.bad,
        bad_examples=[{"line": n, "reason": r} for n, r in report.examples],
    )
    write_json_atomic(out / STORE_INFO, info)
    return info


def encode_shard_range(
    out: Path,
    shards: list[int],
    shard_size: int,
    model: str,
    profile_name: str,
    device: str,
    batch_size: int,
    max_seq_length: int | None,
    report: Callable[[str, float], None],
    encoder_backend: str = "torch",
) -> None:
    """Encode the given shards on one device, each as one length-sorted chunk, writing each when it is done.

    `report("loaded", seconds)` once the model is up, then `report("passages", n)` after every batch.
    """
    started = time.perf_counter()
    encode = shard_encoder(out, shard_size, model, profile_name, device, batch_size, max_seq_length, encoder_backend)
    report("loaded", time.perf_counter() - started)
    for shard in shards:
        encode(shard, lambda k: report("passages", k))


def shard_encoder(
    out: Path,
    shard_size: int,
    model: str,
    profile_name: str,
    device: str,
    batch_size: int,
    max_seq_length: int | None,
    encoder_backend: str = "torch",
) -> Callable[[int, Callable[[int], None]], int]:
    """Load the encoder; returns `encode(shard, on_batch)`, which encodes one shard as one length-sorted chunk,
    writes it and returns its passage count. Every way of building (one process, a process per device, Ray)
    encodes through it, so a shard's bytes do not depend on where it was encoded."""
    encoder = Encoder(
        model, device=device, profile=PROFILES[profile_name], max_seq_length=max_seq_length, backend=encoder_backend
    )
    store = PassageStore(out / STORE_DIR)
    n = len(store)

    def encode(shard: int, on_batch: Callable[[int], None]) -> int:
        rows = range(shard * shard_size, min(n, (shard + 1) * shard_size))
        texts = [passage_text(store.title(r), store.text(r)) for r in rows]
        write_shard(shard_path(out, shard), encoder.encode_passages_sorted(texts, batch_size, on_batch))
        return len(rows)

    return encode


def _worker(
    out: Path,
    shards: list[int],
    shard_size: int,
    model: str,
    profile_name: str,
    device: str,
    batch_size: int,
    max_seq_length: int | None,
    messages: mp.Queue,
    encoder_backend: str,
) -> None:
    encode_shard_range(
        out,
        shards,
        shard_size,
        model,
        profile_name,
        device,
        batch_size,
        max_seq_length,
        lambda kind, value: messages.put((kind, value)),
        encoder_backend,
    )


def run_device_workers(
    out: Path,
    plan: list[tuple[str, list[int]]],
    shard_size: int,
    model: str,
    profile_name: str,
    batch_size: int,
    max_seq_length: int | None,
    bar: tqdm,
    encoder_backend: str = "torch",
) -> float:
    """One spawned process per device over its disjoint run of shards; returns the slowest model load time."""
    ctx = mp.get_context("spawn")
    messages = ctx.Queue()
    sizes = (batch_size, max_seq_length)
    workers = [
        ctx.Process(
            target=_worker,
            name=f"encode-{device}",
            daemon=True,
            args=(out, shards, shard_size, model, profile_name, device, *sizes, messages, encoder_backend),
        )
        for device, shards in plan
    ]
    for worker in workers:
        worker.start()
    load_s = 0.0
    try:
        while True:
            try:
                kind, value = messages.get(timeout=0.5)
            except queue.Empty:
                if all(not w.is_alive() for w in workers):
                    break
                continue
            if kind == "loaded":
                load_s = max(load_s, value)
            else:
                bar.update(value)
        while not messages.empty():
            kind, value = messages.get_nowait()
            if kind == "passages":
                bar.update(value)
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
            worker.join()
    failed = [f"{w.name} (exit {w.exitcode})" for w in workers if w.exitcode != 0]
    if failed:
        raise RuntimeError(f"encoding workers failed: {', '.join(failed)}; finished shards are kept, re-run to resume")
    return load_s


def encode_shards(
    out: Path,
    model: str,
    profile_name: str,
    devices: list[str],
    batch_size: int,
    shard_size: int,
    max_seq_length: int | None,
    checksum: str,
    encoder_backend: str = "torch",
    ray: str | None = None,
    ray_workers: int | None = None,
) -> tuple[list[Path], int, dict]:
    """Encode every shard not already finished for this corpus; returns (shards, dimension, timings). With `ray`
    (a cluster's address, or `local`) the shards are encoded by a pool of `ray_workers` Ray workers."""
    n = len(PassageStore(out / STORE_DIR))
    n_shards = max(1, math.ceil(n / shard_size))
    shards = shard_paths(out, n_shards)
    info = {
        "corpus_sha256": checksum,
        "model": model,
        "profile": profile_name,
        "shard_size": shard_size,
        "passages": n,
        "max_seq_length": max_seq_length,
    }
    previous = read_json(out / EMBED_INFO)
    stale = previous is not None and {k: previous.get(k) for k in info} != info
    if stale and previous.get("corpus_sha256") == checksum:
        raise SystemExit(
            f"{out / EMBED_DIR} holds shards made with {previous}, not {info}; use another --out "
            f"or delete {out / EMBED_DIR}"
        )
    if previous is None or stale:
        # Shards of another corpus, or of none on record, would be reused row for row against this corpus's
        # store: they go before the record does, so an interrupted clean-up is finished by the next run.
        if (out / EMBED_DIR).is_dir() and any((out / EMBED_DIR).iterdir()):
            log.warning("embedding shards in %s were not made from this corpus; re-encoding", out / EMBED_DIR)
            shutil.rmtree(out / EMBED_DIR)
        remove_durably(out / EMBED_INFO)
        (out / EMBED_DIR).mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / EMBED_INFO, info)
    todo = [i for i, p in enumerate(shards) if not p.exists()]
    if len(todo) < n_shards:
        log.info("%d of %d embedding shards already finished, skipping them", n_shards - len(todo), n_shards)
    sizes = [min(shard_size, n - i * shard_size) for i in todo]
    timings = {"model_load_seconds": 0.0, "encode_seconds": 0.0, "encoded_passages": sum(sizes)}
    if todo:
        bar = tqdm(total=sum(sizes), desc="encode", unit=" passages", dynamic_ncols=True)
        started = time.perf_counter()
        if ray is not None:
            from searchrl.search.index.ray_encode import encode_on_ray  # loads Ray: only a --ray build needs it

            sizes_kw = {"batch_size": batch_size, "max_seq_length": max_seq_length, "encoder_backend": encoder_backend}
            load = functools.partial(shard_encoder, out.resolve(), shard_size, model, profile_name, **sizes_kw)
            on_gpu = devices[0].startswith("cuda")
            timings["model_load_seconds"] = encode_on_ray(ray, ray_workers, todo, load, on_gpu, bar.update)
        else:
            timings["model_load_seconds"] = _encode_on_devices(
                out, todo, sizes, devices, shard_size, model, profile_name, batch_size, max_seq_length, bar,
                encoder_backend,
            )  # fmt: skip
        timings["encode_seconds"] = time.perf_counter() - started
        bar.close()
    missing = [p.name for p in shards if not p.exists()]
    if missing:
        raise RuntimeError(f"embedding shards missing after encoding: {missing[:5]}")
    dimension = int(np.load(shards[0], mmap_mode="r").shape[1])
    if read_json(out / EMBED_INFO) != {**info, "dimension": dimension}:
        write_json_atomic(out / EMBED_INFO, {**info, "dimension": dimension})
    return shards, dimension, timings


def _encode_on_devices(
    out: Path,
    todo: list[int],
    sizes: list[int],
    devices: list[str],
    shard_size: int,
    model: str,
    profile_name: str,
    batch_size: int,
    max_seq_length: int | None,
    bar: tqdm,
    encoder_backend: str,
) -> float:
    """Encode the shards `todo` on this machine's devices; returns the slowest model load time."""
    plan = list(zip(devices, split_ranges(todo, sizes, len(devices)), strict=False))
    if len(plan) == 1:
        # One device needs no worker process: encode here, with the same function the workers run.
        loads: list[float] = []
        encode_shard_range(
            out,
            plan[0][1],
            shard_size,
            model,
            profile_name,
            plan[0][0],
            batch_size,
            max_seq_length,
            lambda kind, value: loads.append(value) if kind == "loaded" else bar.update(value),
            encoder_backend,
        )
        return loads[0]
    log.info("encoding on %d devices: %s", len(plan), ", ".join(f"{d}: {len(s)} shards" for d, s in plan))
    return run_device_workers(
        out, plan, shard_size, model, profile_name, batch_size, max_seq_length, bar, encoder_backend
    )


def build_vector_index(
    out: Path,
    shards: list[Path],
    dimension: int,
    index_type: str,
    factory: str | None,
    device: str,
    train_size: int,
    checksum: str,
) -> tuple[dict, float]:
    """Train and fill the FAISS index of `faiss` and `compact` types (reused when its record matches)."""
    # FAISS loads on first use, not with this module: the spawned encoding workers import this module to run
    # `_worker` and never need it, nor does `--help`.
    from searchrl.search.index.faiss_index import build_faiss_index, write_index_atomic

    info = {
        "corpus_sha256": checksum,
        "index_type": index_type,
        "factory": factory,
        "train_size": train_size,
        "passages": sum(int(np.load(p, mmap_mode="r").shape[0]) for p in shards),
        "dimension": dimension,
    }
    if factory is None:
        remove_durably(out / INDEX_INFO)
        remove_durably(out / INDEX_FILE)
        return {**info, "bytes": None}, 0.0
    previous = read_json(out / INDEX_INFO)
    path = out / INDEX_FILE
    if (
        previous
        and {k: previous.get(k) for k in info} == info
        and path.is_file()
        and path.stat().st_size == previous.get("bytes")
    ):
        log.info("index %s already built, reusing it", factory)
        return previous, 0.0
    remove_durably(out / INDEX_INFO)
    started = time.perf_counter()
    index = build_faiss_index(shards, dimension, factory, device=device, train_size=train_size)
    write_index_atomic(index, path)
    seconds = time.perf_counter() - started
    info["bytes"] = path.stat().st_size
    write_json_atomic(out / INDEX_INFO, info)
    return info, seconds


def settle_index(
    out: Path,
    shards: list[Path],
    index_type: str,
    factory: str | None,
    queries: Callable[[], tuple[np.ndarray, str]],
    accept_recall: float | None,
) -> tuple[str, str | None, dict, dict]:
    """An approximate index measures what it keeps of the exact top-10 and takes the cheapest setting keeping
    0.99 of it (searchrl/search/index/recall.py). Where none does, the index is to be exact (compact: the exact
    type over its shards, factory None; faiss: Flat), unless its best setting keeps `accept_recall`. Returns the
    index type and factory to keep, the manifest's `recall` record and its `search_params`; the caller makes the
    index again when the factory changed."""
    from searchrl.search.index import recall  # loads FAISS: see build_vector_index
    from searchrl.search.index.faiss_import import faiss

    if not recall.approximate(index_type, factory):
        return index_type, factory, {"outcome": "exact", "recall": 1.0}, {}
    index = faiss.read_index(str(out / INDEX_FILE))
    vectors, source = queries()
    target = recall.GENERATED_TARGET if source == recall.ROW_QUERIES else recall.TARGET
    tuning = recall.measure(index, EmbeddingShards(shards), kind_of(index_type).reranks, vectors, source, target)
    record = tuning.record()
    shown = ", ".join(f"{k} {v}" for k, v in tuning.params.items()) or "no search parameter"
    if tuning.reached:
        log.info("%s keeps %.4f of the exact top-10 at %s (%d queries: %s)", factory, tuning.recall, shown,
                 tuning.queries, tuning.query_source)  # fmt: skip
        return index_type, factory, {**record, "outcome": "tuned"}, tuning.params
    if accept_recall is not None and tuning.recall >= accept_recall:
        log.warning("%s keeps %.4f of the exact top-10 at best (%s), below %.2f: kept, as --accept-recall %s allows",
                    factory, tuning.recall, shown, tuning.target, accept_recall)  # fmt: skip
        return index_type, factory, {**record, "outcome": f"accepted (--accept-recall {accept_recall})"}, tuning.params
    kept = kind_of(index_type).exact_fallback
    log.warning(
        "%s keeps %.4f of the exact top-10 at best (%s), below %.2f: keeping an exact index (%s); --accept-recall R "
        "keeps the approximate one", factory, tuning.recall, shown, tuning.target, kept[1] or kept[0]
    )  # fmt: skip
    record = {**record, "outcome": f"exact: no setting of {factory} kept {tuning.target}", "approximate": factory}
    return *kept, record, {}


def compact_or_exact(index_type: str, factory: str | None, n: int, dimension: int) -> tuple[str, str | None, bool]:
    """A small corpus's compact index is the exact type: below the size where exact costs no more memory."""
    from searchrl.search.index import recall

    kind = kind_of(index_type)
    if kind.reranks and factory is not None and recall.compact_is_exact(n, dimension, factory):
        log.info("compact at %d passages is the exact type: it costs no more memory than %s would", n, factory)
        return *kind.exact_fallback, True
    return index_type, factory, False


def query_texts(path: str | Path | None) -> list[str] | None:
    """The `--queries` file's queries, read before anything is built so a bad file fails at once."""
    from searchrl.search.index import recall

    if path is None:
        return None
    try:
        return recall.read_queries(Path(path))
    except ValueError as exc:
        raise BuildError(str(exc)) from None


def query_vectors(
    texts: list[str] | None, source: str | Path | None, encoder: Callable[[], Encoder], store: Path, n: int
) -> tuple[np.ndarray, str]:
    """The queries an approximate index measures its recall on, encoded, and what they are (for the manifest):
    the `--queries` file's `texts`, else ones made from a sample of the corpus's own rows (index/recall.py)."""
    from searchrl.search.index import recall

    if texts is None:
        passages = PassageStore(store)
        texts = [recall.row_query(passages[int(r)].title, passages[int(r)].text) for r in recall.sample_rows(n)]
        what = recall.ROW_QUERIES
    else:
        what = f"{len(texts)} queries from {source}"
    return encoder().encode_queries(texts, batch_size=64), what


def build(
    corpus: str | Path,
    fmt: str,
    out: str | Path,
    model: str = DEFAULT_MODEL,
    profile: str | None = None,
    factory: str | None = None,
    device: str = "cpu",
    batch_size: int | None = None,
    shard_size: int = 100_000,
    max_bad_lines: int | None = 0,
    max_bad_fraction: float | None = None,
    train_size: int = 1_000_000,
    max_seq_length: int | None = None,
    index_type: str = "faiss",
    bm25: bool = False,
    bm25_flavour: str = "bm25s",
    encoder_backend: str = "torch",
    queries: str | Path | None = None,
    accept_recall: float | None = None,
    ray: str | None = None,
    ray_workers: int | None = None,
) -> dict:
    """Build (or finish building) an index directory; returns the manifest. An approximate index measures its
    recall on `queries` (a file) or the corpus's own rows, and is tuned or made exact (`settle_index`). With `ray`
    (`local`, `auto` or host:port) the shards are encoded on a Ray cluster (`encode_shards`)."""
    from searchrl.search.index.faiss_index import effective_factory  # loads FAISS: see build_vector_index

    _check_build_options(index_type, factory, accept_recall)
    texts = query_texts(queries)
    devices = resolve_devices(device) if ray is None else _ray_device(device, ray_workers)
    on_gpu = any(d.startswith("cuda") for d in devices)
    batch_size = batch_size or (GPU_BATCH if on_gpu else CPU_BATCH)
    corpus, out = Path(corpus), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # Before anything changes: from here until the new manifest lands, the directory is an unfinished build.
    remove_durably(out / MANIFEST)
    profile_name = profile or profile_for(model).name
    checksum = file_sha256(corpus)
    store_info = build_store(corpus, fmt, out, checksum, max_bad_lines, max_bad_fraction)
    shards, dimension, timings = encode_shards(
        out, model, profile_name, devices, batch_size, shard_size, max_seq_length, checksum, encoder_backend, ray,
        ray_workers,
    )  # fmt: skip
    n = store_info["passages"]
    wanted = factory if factory is not None else default_factory(index_type, dimension, store_info["passages"])
    factory_used = effective_factory(wanted, n) if wanted is not None else None
    if factory_used != wanted:
        log.warning("factory %s clamped to %s for %d passages", wanted, factory_used, n)
    vectors = _recall_queries(texts, queries, model, profile_name, max_seq_length, out / STORE_DIR, n)
    where = "cuda" if on_gpu else "cpu"
    index = _settled_vector_index(
        out, shards, dimension, index_type, factory_used, n, where, train_size, checksum, vectors, accept_recall
    )
    bm25_info = build_bm25(out, checksum, bm25_flavour) if bm25 else None
    manifest = {
        "version": MANIFEST_VERSION,
        "model": model,
        "profile": PROFILES[profile_name].to_dict(),
        "dimension": dimension,
        "normalize": PROFILES[profile_name].normalize,
        "metric": "inner_product",
        "index_type": index.index_type,
        "factory_requested": wanted,
        "factory": index.factory,
        "passages": n,
        "recall": index.recall,
        "search_params": index.search_params,
        "corpus": _corpus_record(corpus, checksum, fmt, store_info),
        "files": _files_record(index, shard_size, shards, bm25_info),
        "bm25": bm25_info,
        "build": _build_record(devices, on_gpu, batch_size, timings, index.seconds, max_seq_length),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    # The manifest goes last: a directory without one is an unfinished build, never a usable index.
    write_json_atomic(out / MANIFEST, manifest)
    return manifest


class _SettledIndex(NamedTuple):
    """The vector index a build keeps, after its recall is measured, and what the manifest records of it."""

    index_type: str
    factory: str | None
    recall: dict
    search_params: dict
    info: dict
    seconds: float


def _ray_device(device: str, ray_workers: int | None) -> list[str]:
    """A Ray build's workers run on `cpu` or on one GPU each (`cuda`), wherever the cluster has them: this
    machine's own devices are not asked for."""
    if device not in ("cpu", "cuda"):
        raise BuildError(f"device: {device!r} with --ray; give cpu or cuda (one GPU per Ray worker)")
    if ray_workers is not None and ray_workers < 1:
        raise BuildError(f"ray_workers: {ray_workers}; give at least 1")
    return [device]


def _check_build_options(index_type: str, factory: str | None, accept_recall: float | None) -> None:
    if index_type not in INDEX_TYPES:
        raise BuildError(f"index_type: {index_type!r} unknown; known: {list(INDEX_TYPES)}")
    if not kind_of(index_type).has_factory and factory is not None:
        raise BuildError(f"factory: the {index_type} index type has no FAISS index; leave --factory out")
    if accept_recall is not None and not 0 < accept_recall <= 1:
        raise BuildError(f"accept_recall: {accept_recall} is not a share of the top-10; give a value in (0, 1]")


def _recall_queries(
    texts: list[str] | None,
    source: str | Path | None,
    model: str,
    profile_name: str,
    max_seq_length: int | None,
    store: Path,
    n: int,
) -> Callable[[], tuple[np.ndarray, str]]:
    """The encoded queries `settle_index` measures recall on, made only when an approximate index asks for them."""

    def encoder() -> Encoder:
        return Encoder(model, profile=PROFILES[profile_name], max_seq_length=max_seq_length, backend="torch")

    def vectors() -> tuple[np.ndarray, str]:
        return query_vectors(texts, source, encoder, store, n)

    return vectors


def _settled_vector_index(
    out: Path,
    shards: list[Path],
    dimension: int,
    index_type: str,
    factory: str | None,
    n: int,
    where: str,
    train_size: int,
    checksum: str,
    vectors: Callable[[], tuple[np.ndarray, str]],
    accept_recall: float | None,
) -> _SettledIndex:
    """Build the index of `factory`, measure its recall (`settle_index`), and build it again where that made it
    exact."""
    index_type, factory, as_exact = compact_or_exact(index_type, factory, n, dimension)
    index_info, index_s = build_vector_index(out, shards, dimension, index_type, factory, where, train_size, checksum)
    measured = factory
    index_type, factory, recall_record, search_params = settle_index(
        out, shards, index_type, factory, vectors, accept_recall
    )
    if factory != measured:  # made exact: Flat built, or the compact index's files removed (factory None)
        index_info, _ = build_vector_index(out, shards, dimension, index_type, factory, where, train_size, checksum)
    if as_exact:
        recall_record = {"outcome": f"exact: compact at {n} passages costs no less memory than exact", "recall": 1.0}
    return _SettledIndex(index_type, factory, recall_record, search_params, index_info, index_s)


def _corpus_record(corpus: Path, checksum: str, fmt: str, store_info: dict) -> dict:
    return {
        "path": str(corpus),
        "sha256": checksum,
        "format": fmt,
        "lines": store_info["lines"],
        "bad_lines": store_info["bad_lines"],
    }


def _files_record(index: _SettledIndex, shard_size: int, shards: list[Path], bm25_info: dict | None) -> dict:
    return {
        "index": INDEX_FILE if index.factory else None,
        "index_bytes": index.info["bytes"],
        "store": STORE_DIR,
        "embeddings": EMBED_DIR,
        "shard_size": shard_size,
        "shards": len(shards),
        "embedding_dtype": "float16",
        "embeddings_required": kind_of(index.index_type).reads_shards,
        "bm25": BM25_DIR if bm25_info else None,
    }


def _build_record(
    devices: list[str], on_gpu: bool, batch_size: int, timings: dict, index_s: float, max_seq_length: int | None
) -> dict:
    """Where and how fast the build ran."""
    from searchrl.search.index.faiss_index import gpu_count

    return {
        "device": ",".join(devices),
        "gpus": sum(d.startswith("cuda") for d in devices) or (gpu_count() if on_gpu else 0),
        "batch_size": batch_size,
        "encoded_passages": timings["encoded_passages"],
        "encode_seconds": round(timings["encode_seconds"], 3),
        "model_load_seconds": round(timings["model_load_seconds"], 3),
        "index_seconds": round(index_s, 3),
        "max_seq_length": max_seq_length,
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="searchrl index build",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--corpus", required=True, help="corpus file")
    p.add_argument(
        "--format",
        required=True,
        choices=FORMATS,
        help="kilt: KILT knowledge-source JSONL, split into 100-word passages; "
        "tsv: id<TAB>text[<TAB>title]; jsonl: {id, title, text}",
    )
    p.add_argument("--out", required=True, help="index directory to create, resume or rebuild")
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"sentence-transformers name or path (default: bundled {DEFAULT_MODEL}; production: {PRODUCTION_MODEL})",
    )
    p.add_argument("--profile", choices=sorted(PROFILES), help="model profile (default: guessed from --model)")
    p.add_argument(
        "--index-type",
        default="faiss",
        choices=INDEX_TYPES,
        help="faiss: the --factory index in RAM; compact: IVF-PQ candidates re-scored exactly from "
        "the fp16 shards (~1/30 of Flat's RAM); exact: exact search over the fp16 shards with "
        "torch, split across GPUs (no FAISS index)",
    )
    p.add_argument(
        "--factory",
        default=None,
        help="FAISS index factory, e.g. Flat, HNSW32, IVF4096,SQ8, IVF4096,PQ128 (default: Flat "
        "for faiss, IVF4096,PQ<d/8> for compact; IVF nlist is clamped to passages/39)",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="cpu, cuda (one encoding worker per visible GPU, fp16) or a list such as cuda:0,cuda:1",
    )
    p.add_argument("--batch-size", type=int, default=None, help=f"default {CPU_BATCH} on CPU, {GPU_BATCH} on GPU")
    p.add_argument(
        "--shard-size",
        type=int,
        default=100_000,
        help="passages per embedding shard: the unit of resumption, of length sorting and of the split across GPUs",
    )
    p.add_argument("--max-seq-length", type=int, default=None, help="truncate passages to this many tokens")
    p.add_argument(
        "--encoder-backend",
        choices=BACKENDS,
        default="torch",
        help="passage encoder on CPU: torch (default: batches of long passages ran 1.3x as fast as under ONNX "
        "Runtime, docs/BENCHMARKS.md#encoding), onnx, auto (ONNX Runtime where its vectors match PyTorch's at load), "
        "onnx-int8 (approximate vectors); GPUs always run PyTorch",
    )
    p.add_argument("--train-size", type=int, default=1_000_000, help="vectors sampled to train IVF/PQ/SQ")
    p.add_argument("--bm25", action="store_true", help="also build the BM25 index (bm25s) beside the dense one")
    p.add_argument(
        "--bm25-flavour",
        choices=["bm25s", "pyserini"],
        default="bm25s",
        help="how BM25 tokenises and weighs: bm25s's defaults, or pyserini's (Search-R1's BM25: k1 0.9, b 0.4, "
        "Lucene's analyzer) (default %(default)s)",
    )
    add_recall_options(p)
    add_ray_options(p)
    p.add_argument(
        "--max-bad-lines",
        type=int,
        default=0,
        help="fail when more corpus lines than this are malformed (-1: no limit)",
    )
    p.add_argument(
        "--max-bad-fraction",
        type=float,
        default=None,
        help="fail when more than this fraction of corpus lines are malformed",
    )
    return p


def add_recall_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--queries",
        type=Path,
        default=None,
        help="an approximate index measures its recall on these queries (one a line, or JSON lines with `query` or "
        "`question`; the first 1,000); default: made from 1,000 of the corpus's own rows (title and first 8 words)",
    )
    p.add_argument(
        "--accept-recall",
        type=float,
        default=None,
        metavar="R",
        help="keep an approximate index whose best setting keeps at least R of the exact top-10 (default: only one "
        "that keeps 0.99; else the index is made exact)",
    )


def add_ray_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help="encode the shards on a Ray cluster with Ray Data: auto, host:port, or local (start one here for this "
        "build); every worker must see --out. Resumable, and byte-identical to the one-process build",
    )
    p.add_argument(
        "--ray-workers",
        type=int,
        default=None,
        metavar="N",
        help="Ray workers: one GPU each with --device cuda, one CPU each with cpu (default: the cluster's GPUs, "
        "else 2)",
    )


def recall_summary(manifest: dict) -> dict:
    """What the end of a build or an import prints about recall."""
    found = manifest.get("recall") or {}
    return {"recall_top10": found.get("recall"), "recall_outcome": found.get("outcome"),
            "search_params": manifest.get("search_params") or {}}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        manifest = build(
            args.corpus,
            args.format,
            args.out,
            model=args.model,
            profile=args.profile,
            factory=args.factory,
            device=args.device,
            batch_size=args.batch_size,
            shard_size=args.shard_size,
            max_bad_lines=None if args.max_bad_lines < 0 else args.max_bad_lines,
            max_bad_fraction=args.max_bad_fraction,
            train_size=args.train_size,
            max_seq_length=args.max_seq_length,
            encoder_backend=args.encoder_backend,
            index_type=args.index_type,
            bm25=args.bm25,
            bm25_flavour=args.bm25_flavour,
            queries=args.queries,
            accept_recall=args.accept_recall,
            ray=args.ray,
            ray_workers=args.ray_workers,
        )
    except TooManyBadLines as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        json.dumps(
            {
                "out": str(args.out),
                "passages": manifest["passages"],
                "index_type": manifest["index_type"],
                "factory": manifest["factory"],
                **recall_summary(manifest),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
