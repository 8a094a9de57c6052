"""Retrieval benchmark: server throughput vs the in-process limit, index types on kiltmini, a full-KILT projection.

    python -m benchmarks.retrieval --kiltmini PATH/TO/kiltmini [--work-dir DIR] [--out FILE]

`--kiltmini` is a directory with passages.jsonl (id, title, text) and queries.jsonl (query, ranked_ids: the
top-5 of R1-Searcher's BGE-large retriever over all of KILT). Embeddings are cached in --work-dir (the index
builder's own resumable shards), so a second run skips encoding.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]

from benchmarks.loadgen import closed_loop  # noqa: E402
from rollout.service import free_port  # noqa: E402
from search_backend.build_index import EMBED_DIR, build  # noqa: E402
from search_backend.faiss_import import faiss  # noqa: E402
from search_backend.faiss_index import build_index, effective_factory, set_search_params  # noqa: E402
from search_backend.local_faiss import LocalFaissBackend  # noqa: E402

FACTORIES = ["Flat", "HNSW32", "IVF4096,SQ8", "IVF4096,PQ64", "IVF4096,PQ96"]
FULL_KILT_PASSAGES = 25_000_000
FULL_KILT_DIM = 1024
# Transformer cost per passage grows roughly with parameter count: bge-large has ~335M, MiniLM-L6 ~22.7M.
BGE_LARGE_COST_RATIO = 335 / 22.7


def load_queries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def recall_of_target(rows: np.ndarray, targets: np.ndarray, k: int) -> float:
    return float(np.mean([(targets[i] >= 0) and targets[i] in rows[i, :k] for i in range(len(targets))]))


def encode_rate(backend: LocalFaissBackend, n: int = 256) -> float:
    from search_backend.encoder import passage_text

    texts = [passage_text(backend.store.title(r), backend.store.text(r)) for r in range(min(n, len(backend.store)))]
    backend.encoder.encode_passages(texts[:32])
    started = time.perf_counter()
    backend.encoder.encode_passages(texts)
    return len(texts) / (time.perf_counter() - started)


def in_process_limit(backend: LocalFaissBackend, queries: list[str], batch: int, seconds: float) -> float:
    backend.search_sync(queries[:batch], 5)
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        start = done % len(queries)
        chunk = (queries[start:] + queries)[:batch]
        backend.search_sync(chunk, 5)
        done += len(chunk)
    return done / (time.perf_counter() - started)


def index_types(
    shards: list[Path],
    dim: int,
    n: int,
    query_vectors: np.ndarray,
    targets: np.ndarray,
    factories: list[str],
    nprobe: int,
    ef_search: int,
) -> list[dict]:
    rows_by_type: dict[str, np.ndarray] = {}
    out = []
    for factory in factories:
        used = effective_factory(factory, n)
        timings: dict[str, float] = {}
        started = time.perf_counter()
        index = build_index(shards, dim, used, timings=timings)
        build_s = time.perf_counter() - started
        empty = faiss.index_factory(dim, used, faiss.METRIC_INNER_PRODUCT)
        if not empty.is_trained:
            empty = faiss.clone_index(index)
            empty.reset()
        total_bytes = len(faiss.serialize_index(index))
        fixed_bytes = len(faiss.serialize_index(empty))
        set_search_params(index, nprobe, ef_search, on_gpu=False)
        started = time.perf_counter()
        _, rows = index.search(query_vectors, 10)
        search_s = time.perf_counter() - started
        rows_by_type[factory] = rows
        flat_top1 = rows_by_type[factories[0]][:, 0]
        out.append(
            {
                "factory": factory,
                "effective_factory": used,
                "build_seconds": round(build_s, 3),
                "train_seconds": round(timings["train_seconds"], 3),
                "add_seconds": round(timings["add_seconds"], 3),
                "index_bytes": total_bytes,
                "fixed_bytes": fixed_bytes,
                "bytes_per_vector": round(total_bytes / n, 1),
                "marginal_bytes_per_vector": round((total_bytes - fixed_bytes) / n, 1),
                "one_recall_at_10_vs_flat": recall_of_target(rows, flat_top1, 10),
                "r1_top1_recall": {f"@{k}": recall_of_target(rows, targets, k) for k in (1, 3, 5, 10)},
                "batched_search_queries_per_s": round(len(query_vectors) / search_s, 1),
            }
        )
    flat_marginal = out[0]["marginal_bytes_per_vector"]
    for row in out:
        row["memory_vs_flat"] = round(row["marginal_bytes_per_vector"] / flat_marginal, 4)
    return out


def projection(types: list[dict], dim: int, n: int, passages_per_s: float, train_size: int = 1_000_000) -> dict:
    """Memory and build time of each type at full-KILT scale, from this run's measured sizes and rates.

    Adding scales with n and the dimension (HNSW also with log n). Training scales with the points k-means
    really uses: FAISS samples at most 256 per centroid, so IVF uses min(train_size, 256 * nlist) and each
    PQ sub-quantizer at most 256 * 256; IVF training also scales with nlist.
    """
    scale_dim = FULL_KILT_DIM / dim
    full_nlist = 4096
    here_nlist = next(
        (int(t["effective_factory"].split(",")[0][3:]) for t in types if t["effective_factory"].startswith("IVF")), 1
    )
    ivf_train_here = next((t["train_seconds"] for t in types if "SQ" in t["factory"]), 0.0)
    ivf_points = min(train_size, 256 * full_nlist, FULL_KILT_PASSAGES) / min(n, 256 * here_nlist)
    ivf_train_full = ivf_train_here * ivf_points * (full_nlist / here_nlist) * scale_dim
    rows = []
    for row in types:
        factory = row["effective_factory"]
        if "SQ8" in factory:
            per_vec, train_s = FULL_KILT_DIM + 8, ivf_train_full
        elif "PQ" in factory:
            pq_train_here = max(0.0, row["train_seconds"] - ivf_train_here)
            per_vec = int(factory.split("PQ")[1].split("x")[0]) + 8
            train_s = ivf_train_full + pq_train_here * (256 * 256 / min(n, 256 * 256)) * scale_dim
        elif "HNSW" in factory:
            per_vec, train_s = 4 * FULL_KILT_DIM + (row["marginal_bytes_per_vector"] - 4 * dim), 0.0
        else:
            per_vec, train_s = 4 * FULL_KILT_DIM, 0.0
        add_s = row["add_seconds"] / n * FULL_KILT_PASSAGES * scale_dim
        if "HNSW" in factory:
            add_s *= np.log(FULL_KILT_PASSAGES) / np.log(n)
        rows.append(
            {
                "factory": row["factory"],
                "bytes_per_vector": round(per_vec, 1),
                "memory_gib": round(per_vec * FULL_KILT_PASSAGES / 2**30, 1),
                "train_hours": round(train_s / 3600, 2),
                "add_hours": round(add_s / 3600, 2),
            }
        )
    minilm_s = FULL_KILT_PASSAGES / passages_per_s
    return {
        "passages": FULL_KILT_PASSAGES,
        "dimension": FULL_KILT_DIM,
        "model": "BAAI/bge-large-en-v1.5",
        "index_types": rows,
        "encode_hours_minilm_this_cpu": round(minilm_s / 3600, 1),
        "encode_hours_bge_large_this_cpu": round(minilm_s * BGE_LARGE_COST_RATIO / 3600, 1),
        "note": "rates measured on this machine's CPU, scaled by dimension, sample size and parameter count; "
        "GPU encoding and faiss-gpu training are far faster, so measure those there before planning.",
    }


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


async def load(url: str, queries: list[str], concurrency: int, seconds: float) -> float:
    """Single-query `POST /search` requests/s at the given concurrency."""
    bodies = [json.dumps({"queries": [q], "top_k": 5}).encode() for q in queries]
    result = await closed_loop(url, "/search", bodies, concurrency, seconds, ok_prefix=b'{"results"')
    if result.errors:
        print(f"concurrency {concurrency}: {result.errors} failed requests, first: {result.first_error}", flush=True)
    return result.rps


def server_throughput(
    index_dir: Path,
    queries: list[str],
    levels: list[int],
    batching: bool,
    seconds: float,
    max_batch: int,
    threads: int | None = None,
) -> dict[str, float]:
    import httpx

    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "search_backend.serve",
        "--index",
        str(index_dir),
        "--port",
        str(port),
        "--cache-size",
        "0",
        "--max-batch",
        str(max_batch),
    ] + ([] if batching else ["--no-batching"])
    cmd += ["--threads", str(threads)] if threads else []
    log_path = index_dir.parent / f"serve-{'on' if batching else 'off'}.log"
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log_path.open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("retrieval server did not start")
            time.sleep(0.5)
        asyncio.run(load(url, queries, 8, 2.0))
        rates = {}
        for c in levels:
            rates[str(c)] = round(asyncio.run(load(url, queries, c, seconds)), 1)
            print(f"server batching={batching} concurrency={c}: {rates[str(c)]} requests/s", flush=True)
        return rates
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiltmini", type=Path, required=True, help="directory with passages.jsonl and queries.jsonl")
    p.add_argument(
        "--work-dir",
        type=Path,
        default=Path("/tmp/searchrl-bench"),
        help="index and embedding cache (reused between runs)",
    )
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "retrieval.json")
    p.add_argument("--factory", action="append", help=f"index type (repeatable; default {FACTORIES})")
    p.add_argument("--nprobe", type=int, default=64)
    p.add_argument("--ef-search", type=int, default=128)
    p.add_argument("--concurrency", default="1,8,64,256")
    p.add_argument("--seconds", type=float, default=8.0, help="load duration per concurrency level")
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument(
        "--server-threads",
        type=int,
        default=1,
        help="serve --threads: torch/FAISS threads in the server (1 leaves a core for HTTP on 2 cores)",
    )
    p.add_argument("--skip-server", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    factories = args.factory or FACTORIES
    index_dir = args.work_dir / "kiltmini"
    manifest = build(args.kiltmini / "passages.jsonl", "jsonl", index_dir, shard_size=1000)
    backend = LocalFaissBackend(index_dir, nprobe=args.nprobe, ef_search=args.ef_search)
    n, dim = manifest["passages"], manifest["dimension"]
    queries = load_queries(args.kiltmini / "queries.jsonl")
    texts = [q["query"] for q in queries]
    row_of = {backend.store[r].id: r for r in range(n)}
    targets = np.array([row_of.get(q["ranked_ids"][0], -1) for q in queries])
    query_vectors = backend.encoder.encode_queries(texts)
    shards = sorted((index_dir / EMBED_DIR).glob("shard_*.npy"))

    result: dict = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "faiss": faiss.__version__},
        "model": manifest["model"],
        "passages": n,
        "queries": len(queries),
        "dimension": dim,
        "search_params": {"nprobe": args.nprobe, "efSearch": args.ef_search},
    }
    result["encode_passages_per_s"] = round(encode_rate(backend), 1)
    print(f"encode: {result['encode_passages_per_s']} passages/s", flush=True)
    result["index_types"] = index_types(shards, dim, n, query_vectors, targets, factories, args.nprobe, args.ef_search)
    for row in result["index_types"]:
        print(json.dumps(row), flush=True)
    result["projection_full_kilt"] = projection(result["index_types"], dim, n, result["encode_passages_per_s"])
    print(json.dumps(result["projection_full_kilt"]), flush=True)

    if not args.skip_server:
        levels = [int(c) for c in args.concurrency.split(",")]
        limit = in_process_limit(backend, texts, args.max_batch, args.seconds)
        from search_backend.serve import set_cpu_threads

        default_threads = torch_threads()
        set_cpu_threads(args.server_threads)
        limit_same_threads = in_process_limit(backend, texts, args.max_batch, args.seconds)
        set_cpu_threads(default_threads)
        del backend
        on = server_throughput(index_dir, texts, levels, True, args.seconds, args.max_batch, args.server_threads)
        off = server_throughput(index_dir, texts, levels, False, args.seconds, args.max_batch, args.server_threads)
        result["server"] = {
            "in_process_limit_queries_per_s": round(limit, 1),
            "batch_size": args.max_batch,
            "in_process_threads": default_threads,
            "in_process_limit_at_server_threads_queries_per_s": round(limit_same_threads, 1),
            "server_threads": args.server_threads,
            "batching_on_requests_per_s": on,
            "batching_off_requests_per_s": off,
            "ratio_to_limit_at_64": round(on.get("64", 0.0) / limit, 3) if "64" in on else None,
            "ratio_to_limit_at_server_threads_at_64": round(on.get("64", 0.0) / limit_same_threads, 3)
            if "64" in on
            else None,
        }
        print(json.dumps(result["server"]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
