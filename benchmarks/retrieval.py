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
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tqdm import tqdm  # noqa: E402

from benchmarks.loadgen import LoadResult, closed_loop, cpu_seconds, process_tree  # noqa: E402
from searchrl.paths import ROOT  # noqa: E402
from searchrl.process import free_port  # noqa: E402
from searchrl.search.index.build import build  # noqa: E402
from searchrl.search.index.cpu_threads import SPIN_COUNT  # noqa: E402
from searchrl.search.index.faiss_import import faiss  # noqa: E402
from searchrl.search.index.faiss_index import build_faiss_index, effective_factory, set_search_params  # noqa: E402
from searchrl.search.index.layout import EMBED_DIR  # noqa: E402
from searchrl.search.local_faiss import LocalFaissBackend  # noqa: E402

FACTORIES = ["Flat", "HNSW32", "IVF4096,SQ8", "IVF4096,PQ64", "IVF4096,PQ96"]
FULL_KILT_PASSAGES = 25_000_000
FULL_KILT_DIM = 1024
# Transformer cost per passage grows roughly with parameter count: bge-large has ~335M, MiniLM-L6 ~22.7M.
BGE_LARGE_COST_RATIO = 335 / 22.7
QUERIES = ROOT / "tests/fixtures/search/queries_1000.txt"
TOP_K = 3
VARIANTS = ["--threads 1", "--threads 2", "--max-wait-ms 0", "--split-min 16", "--forward-batch 64 --split-min 16"]


def load_queries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def recall_of_target(rows: np.ndarray, targets: np.ndarray, k: int) -> float:
    return float(np.mean([(targets[i] >= 0) and targets[i] in rows[i, :k] for i in range(len(targets))]))


def encode_rate(backend: LocalFaissBackend, n: int = 256) -> float:
    from searchrl.search.encode.encoder import passage_text

    texts = [passage_text(backend.store.title(r), backend.store.text(r)) for r in range(min(n, len(backend.store)))]
    backend.encoder.encode_passages(texts[:32])
    started = time.perf_counter()
    backend.encoder.encode_passages(texts)
    return len(texts) / (time.perf_counter() - started)


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
        index = build_faiss_index(shards, dim, used, timings=timings)
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


@dataclass(frozen=True)
class Target:
    """One server endpoint measured: how to start its process, what to send, what a served answer starts with."""

    name: str
    process: str
    path: str
    body: Callable[[str], dict]
    ok_prefix: bytes


def _search(q: str) -> dict:
    return {"queries": [q], "top_k": TOP_K}


def _r1(q: str) -> dict:
    return {"queries": [q], "k": TOP_K}


def _search_r1(q: str) -> dict:
    return {"queries": [q], "topk": TOP_K, "return_scores": True}


def peers(args: argparse.Namespace) -> dict[str, Path | None]:
    return {"search-r1": args.search_r1, "r1-searcher": args.r1_searcher}


def server_processes(index_dir: Path, args: argparse.Namespace) -> dict[str, list[str]]:
    """Every process to start: ours at its defaults and each variant named in --variants, the peers given."""
    ours = [sys.executable, "-m", "search_backend.serve", "--index", str(index_dir), "--cache-size", "0"]
    processes = {"searchrl": ours}
    for variant in args.variants:
        processes[f"searchrl {variant}"] = ours + variant.split()
    for peer, file in peers(args).items():
        if file is not None:
            cmd = [sys.executable, "-m", "benchmarks.peers", peer, "--file", str(file), "--index", str(index_dir)]
            processes[peer] = cmd
            for threads in args.peer_threads:
                processes[f"{peer} --threads {threads}"] = [*cmd, "--threads", str(threads)]
    return processes


def targets(processes: dict[str, list[str]]) -> list[Target]:
    found = [
        Target("searchrl /search", "searchrl", "/search", _search, b'{"results"'),
        Target("searchrl /retrieve", "searchrl", "/retrieve", _search_r1, b'{"result"'),
        Target("searchrl /queries", "searchrl", "/queries", _r1, b'{"queries"'),
    ]
    found += [
        Target(name, name, "/search", _search, b'{"results"') for name in processes if name.startswith("searchrl ")
    ]
    for name in processes:
        threads = name.partition(" --threads ")[2]
        shown = f" ({threads} thread{'s' * (threads != '1')})" if threads else ""
        if name.startswith("search-r1"):
            found.append(Target(f"Search-R1 /retrieve{shown}", name, "/retrieve", _search_r1, b'{"result"'))
        if name.startswith("r1-searcher"):
            found.append(Target(f"R1-Searcher /queries{shown}", name, "/queries", _r1, b'{"answers"'))
    return found


def thread_counts_of(url: str, target: Target) -> tuple[int, int] | None:
    """(backend calls on every core, backend calls) so far, for our servers with `--threads auto`."""
    import httpx

    if not target.process.startswith("searchrl"):
        return None
    health = httpx.get(f"{url}/health", timeout=30).json()
    threads = health.get("cpu_threads") or {}
    if "searches_on_every_core" not in threads or not str(threads.get("threads", "")).startswith("auto"):
        return None
    return threads["searches_on_every_core"], health["batching"]["batches"]


def start_server(cmd: list[str], probe: Target, log: Path) -> tuple[subprocess.Popen, str]:
    """The process started and answering a real request on `probe.path` (the peers have no health check)."""
    import httpx

    port = free_port()
    proc = subprocess.Popen([*cmd, "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.post(f"{url}{probe.path}", json=probe.body("warm up"), timeout=30).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{' '.join(cmd)} did not start; see {log}")
        time.sleep(0.5)


def block(url: str, target: Target, queries: list[str], concurrency: int, seconds: float) -> LoadResult:
    bodies = [json.dumps(target.body(q)).encode() for q in queries]
    result = asyncio.run(closed_loop(url, target.path, bodies, concurrency, seconds, ok_prefix=target.ok_prefix))
    if result.errors:
        print(f"{target.name} c={concurrency}: {result.errors} failed, first: {result.first_error}", flush=True)
    return result


def idle_wake_cost(url: str, pid: int, idle_s: float = 0.015, rounds: int = 3) -> dict:
    """Server CPU per `GET /health` (HTTP and the event loop only: no batch, no thread, no encode) back to back,
    and with `idle_s` between requests (the time a lone query's encode leaves the event loop asleep). The
    difference is what waking an idle thread costs on this machine, which a server at concurrency 1 pays and
    an in-process loop never does."""
    host, port = url.removeprefix("http://").split(":")
    costs: dict[str, list[float]] = {"back_to_back": [], "after_idle": []}

    # Raw HTTP/1.1 on one keep-alive connection, as the load generator writes it: a heavier client would leave
    # the server idle between "back to back" requests too.
    async def run() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))

        async def one() -> None:
            writer.write(b"GET /health HTTP/1.1\r\nHost: %s\r\n\r\n" % host.encode())
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"GET /health answered {head[:40]!r}")
            lines = head.lower().split(b"\r\n")
            await reader.readexactly(
                int(next(line.split(b":")[1] for line in lines if line.startswith(b"content-length")))
            )

        try:
            for _ in range(200):
                await one()
            for _ in range(rounds):
                for name, count, pause in (("back_to_back", 2000, 0.0), ("after_idle", 300, idle_s)):
                    before = cpu_seconds([pid])
                    for _ in range(count):
                        await one()
                        if pause:
                            await asyncio.sleep(pause)
                    costs[name].append(1000 * (cpu_seconds([pid]) - before) / count)
        finally:
            writer.close()

    asyncio.run(run())
    return {
        "endpoint": "GET /health",
        "idle_ms": idle_s * 1000,
        "blocks": rounds,
        "server_cpu_ms_per_request": {k: round(statistics.median(v), 3) for k, v in costs.items()},
    }


def in_process_block(
    backend: LocalFaissBackend, queries: list[str], batch: int, seconds: float, pause_s: float = 0.0
) -> float:
    """Queries/s of encode + search, `batch` queries per call, no HTTP. With `pause_s`, the process sleeps that
    long between calls and the rate counts only the time in calls: what idling between requests (as a server
    at concurrency one does while its answer travels) costs the next call, and nothing else."""
    done, busy, started = 0, 0.0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        start = done % len(queries)
        t0 = time.perf_counter()
        backend.search_sync((queries[start:] + queries)[:batch], TOP_K)
        busy += time.perf_counter() - t0
        done += batch
        if pause_s:
            time.sleep(pause_s)
    return done / busy


# A loopback round trip through the server at concurrency one (answer written, read, next request parsed) is
# about a millisecond here: the in-process rate with that idle time between calls is what a server could reach.
IDLE_PAUSE_S = 0.001


def in_process_worker(index_dir: Path, queries_file: Path, threads: int) -> None:
    """A process of its own per thread count, set once at start as the server sets it: each stdin line
    `BATCH SECONDS` is answered with the queries/s of one block."""
    from searchrl.search.index.cpu_threads import set_threads

    set_threads(threads)
    backend = LocalFaissBackend(index_dir)
    queries = [q for q in queries_file.read_text(encoding="utf-8").splitlines() if q.strip()]
    in_process_block(backend, queries, 1, 1.0)
    print("ready", flush=True)
    for line in sys.stdin:
        batch, seconds, pause = line.split()
        print(round(in_process_block(backend, queries, int(batch), float(seconds), float(pause)), 1), flush=True)


class InProcess:
    """The in-process rate at one thread count, measured by a worker process on request."""

    def __init__(self, index_dir: Path, args: argparse.Namespace, threads: int) -> None:
        cmd = [sys.executable, "-m", "benchmarks.retrieval", "--kiltmini", str(args.kiltmini), "--index-worker"]
        cmd += [str(index_dir), "--queries", str(args.queries), "--in-process-threads", str(threads)]
        self.threads = threads
        # The OpenMP spin count our server sets itself (searchrl/search/index/cpu_threads.py); the peers keep theirs.
        env = {**os.environ, "GOMP_SPINCOUNT": SPIN_COUNT}
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        )
        if self.proc.stdout is None or self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"in-process worker ({threads} threads) did not start")

    def rate(self, batch: int, seconds: float, pause_s: float = 0.0) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{batch} {seconds} {pause_s}\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def medians(table: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    return {c: {k: statistics.median(v) for k, v in row.items()} for c, row in table.items()}


def compare_servers(index_dir: Path, queries: list[str], args: argparse.Namespace) -> dict:
    """Interleaved blocks, every round: each level in turn, and at each level every target once (the order
    rotating from round to round) plus the in-process rate at the batch that level allows."""
    from searchrl.search.index.layout import STORE_DIR
    from searchrl.search.index.store import PassageStore

    passages = len(PassageStore(index_dir / STORE_DIR))
    thread_counts = args.in_process_threads or sorted({1, torch_threads()})
    workers: dict[int, InProcess] = {}
    processes = server_processes(index_dir, args)
    measured = targets(processes)
    levels = [int(c) for c in args.concurrency.split(",")]
    started: dict[str, tuple[subprocess.Popen, str]] = {}
    rates: dict[str, dict[str, list[float]]] = {str(c): {} for c in levels}
    latency: dict[str, dict[str, list[float]]] = {str(c): {} for c in levels}
    # CPU time per request of the server's processes (per query in process): other engineers' load moves it
    # far less than it moves wall-clock rates.
    cpu_ms: dict[str, dict[str, list[float]]] = {str(c): {} for c in levels}
    errors: dict[str, int] = {}
    # Of our servers' backend calls in a block, the share that ran on every core (`--threads auto`, the default).
    every_core: dict[str, dict[str, list[float]]] = {str(c): {} for c in levels}
    load_before = os.getloadavg()[0]
    try:
        for name, cmd in processes.items():
            probe = next(t for t in measured if t.process == name)
            started[name] = start_server(cmd, probe, args.work_dir / f"{name.replace(' ', '_')}.log")
            block(started[name][1], probe, queries, 8, 2.0)
            print(f"started {name}", flush=True)
        workers.update((t, InProcess(index_dir, args, t)) for t in thread_counts)
        for r in tqdm(range(args.rounds), desc="rounds"):
            for c in levels:
                batch = min(c, args.max_batch)
                shift = r % (len(measured) + len(thread_counts))
                order = [*measured, *thread_counts][shift:] + [*measured, *thread_counts][:shift]
                for target in order:
                    if isinstance(target, int):
                        key = f"in-process, {target} thread{'s' * (target > 1)}, batch {batch}"
                        pauses = [0.0, IDLE_PAUSE_S] if c == 1 and target == 1 else [0.0]
                        for pause in pauses:
                            label = key if not pause else f"{key}, {pause * 1000:g} ms idle between calls"
                            before = cpu_seconds([workers[target].proc.pid])
                            rate = workers[target].rate(batch, args.seconds, pause)
                            used = cpu_seconds([workers[target].proc.pid]) - before
                            rates[str(c)].setdefault(label, []).append(round(rate, 1))
                            if not pause:  # a paused block's rate counts only its time in calls
                                cpu_ms[str(c)].setdefault(label, []).append(
                                    round(1000 * used / (rate * args.seconds), 2)
                                )
                        continue
                    pids = process_tree(started[target.process][0].pid)
                    if args.settle:
                        # The same load, unmeasured, first: the previous block's process has just gone idle, and
                        # `--threads auto` needs up to a second of its own samples to see it (cpu_threads.py).
                        block(started[target.process][1], target, queries, c, args.settle)
                    counts = thread_counts_of(started[target.process][1], target)
                    before = cpu_seconds(pids)
                    result = block(started[target.process][1], target, queries, c, args.seconds)
                    used = cpu_seconds(pids) - before
                    if counts is not None and (after := thread_counts_of(started[target.process][1], target)):
                        calls = after[1] - counts[1]
                        if calls:
                            every_core[str(c)].setdefault(target.name, []).append(
                                round((after[0] - counts[0]) / calls, 3)
                            )
                    rates[str(c)].setdefault(target.name, []).append(round(result.rps, 1))
                    if result.requests:
                        cpu_ms[str(c)].setdefault(target.name, []).append(round(1000 * used / result.requests, 2))
                    latency[str(c)].setdefault(target.name, []).append(round(result.p50_ms, 2))
                    errors[target.name] = errors.get(target.name, 0) + result.errors
        wake = idle_wake_cost(started["searchrl"][1], started["searchrl"][0].pid)
    finally:
        for proc, _ in started.values():
            proc.terminate()
            proc.wait(timeout=30)
        for worker in workers.values():
            worker.close()
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        # The machine is shared: its 1-minute load average before and after says how busy it was.
        "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "passages": passages,
        "queries": len(queries),
        "top_k": TOP_K,
        "seconds_per_block": args.seconds,
        "settle_seconds": args.settle,
        "rounds": args.rounds,
        "in_process_threads": thread_counts,
        "max_batch": args.max_batch,
        "processes": {name: " ".join(cmd[2:]).replace(str(ROOT) + "/", "") for name, cmd in processes.items()},
        "peer_files": {
            peer: str(file)
            for peer, file in (("search-r1", args.search_r1), ("r1-searcher", args.r1_searcher))
            if file
        },
        "requests_per_s": rates,
        "p50_ms": latency,
        "errors": errors,
        "median_requests_per_s": {c: {k: statistics.median(v) for k, v in row.items()} for c, row in rates.items()},
        "median_p50_ms": {c: {k: statistics.median(v) for k, v in row.items()} for c, row in latency.items()},
        "cpu_ms_per_request": cpu_ms,
        "median_cpu_ms_per_request": {
            c: {k: statistics.median(v) for k, v in row.items()} for c, row in cpu_ms.items()
        },
        "idle_wake_cost": wake,
        "every_core_share": every_core,
        "median_every_core_share": {
            c: {k: statistics.median(v) for k, v in row.items()} for c, row in every_core.items()
        },
    }


def held_out_index(kiltmini: Path, work_dir: Path, offset: int, count: int) -> Path:
    """A Flat index of `count` passages from line `offset` of kiltmini's passages (reused between runs)."""
    lines = (kiltmini / "passages.jsonl").read_text(encoding="utf-8").splitlines()[offset : offset + count]
    if len(lines) < count:
        raise SystemExit(f"--held-out {offset},{count}: {kiltmini / 'passages.jsonl'} has too few lines")
    corpus = work_dir / f"held_out_{offset}_{count}.jsonl"
    work_dir.mkdir(parents=True, exist_ok=True)
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    index_dir = work_dir / f"held_out_{offset}_{count}"
    build(corpus, "jsonl", index_dir, shard_size=1000)
    return index_dir


def _held_out(text: str) -> tuple[int, int]:
    try:
        offset, count = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected OFFSET,COUNT (e.g. 3000,640)") from None
    return offset, count


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
    p.add_argument("--skip-index-types", action="store_true", help="servers only; other sections kept from --out")
    p.add_argument("--skip-server", action="store_true")
    p.add_argument(
        "--idle-cost-only",
        action="store_true",
        help="only the event loop's CPU per request back to back and after idling; other sections kept from --out",
    )
    servers = p.add_argument_group("servers side by side")
    servers.add_argument(
        "--search-r1", type=Path, help="Search-R1's search_r1/search/retrieval_server.py, from a clone of its repo"
    )
    servers.add_argument("--r1-searcher", type=Path, help="R1-Searcher's train/wiki_corpus_load.py (its Flask server)")
    servers.add_argument(
        "--held-out",
        type=_held_out,
        default=(3000, 640),
        help="OFFSET,COUNT: the lines of kiltmini's passages.jsonl the servers index (default 3000,640)",
    )
    servers.add_argument("--queries", type=Path, default=QUERIES, help="one query per line (default: 1,000 distinct)")
    servers.add_argument(
        "--variant",
        dest="variants",
        action="append",
        help=f"serve options of another searchrl process measured beside the default (default: {VARIANTS})",
    )
    servers.add_argument("--concurrency", default="1,16,64,256")
    servers.add_argument("--seconds", type=float, default=3.0, help="length of one block")
    servers.add_argument("--rounds", type=int, default=3, help="blocks per target and level; medians reported")
    servers.add_argument(
        "--settle", type=float, default=1.0, help="seconds of the same load, unmeasured, before each server's block"
    )
    p.add_argument("--index-worker", type=Path, help=argparse.SUPPRESS)
    servers.add_argument(
        "--peer-threads",
        type=int,
        nargs="*",
        default=[1],
        help="also run each peer at these torch/FAISS thread counts (default 1, the server's on 2 cores)",
    )
    servers.add_argument("--max-batch", type=int, default=64, help="the server's --max-batch (its default)")
    servers.add_argument(
        "--in-process-threads",
        type=int,
        nargs="+",
        help="torch/FAISS threads of the in-process rates (default: 1 and torch's own)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.index_worker:
        in_process_worker(args.index_worker, args.queries, args.in_process_threads[0])
        return 0
    args.variants = VARIANTS if args.variants is None else args.variants
    result: dict = {}
    if args.skip_index_types or args.idle_cost_only:
        result = json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {}
    else:
        result = index_type_section(args)
    if args.idle_cost_only:
        index_dir = held_out_index(args.kiltmini, args.work_dir, *args.held_out)
        cmd = server_processes(index_dir, args)["searchrl"]
        probe = targets({"searchrl": cmd})[0]
        proc, url = start_server(cmd, probe, args.work_dir / "searchrl.log")
        try:
            result.setdefault("servers", {})["idle_wake_cost"] = idle_wake_cost(url, proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        print(json.dumps(result["servers"]["idle_wake_cost"]), flush=True)
    elif not args.skip_server:
        index_dir = held_out_index(args.kiltmini, args.work_dir, *args.held_out)
        queries = [q for q in args.queries.read_text(encoding="utf-8").splitlines() if q.strip()]
        servers = compare_servers(index_dir, queries, args)
        servers["held_out"] = {"corpus": "kiltmini/passages.jsonl", "offset": args.held_out[0]}
        result["servers"] = servers
        result.pop("server", None)
        print(json.dumps(servers["median_requests_per_s"], indent=1), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


def index_type_section(args: argparse.Namespace) -> dict:
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
        "date": time.strftime("%Y-%m-%d"),
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
    return result


if __name__ == "__main__":
    raise SystemExit(main())
