"""Index types against corpus size: resident memory, build time, queries/s and 1-recall@10, projected to 25M.

    python -m benchmarks.scale [--sizes 100000,500000,1000000,2000000] [--dim 1024] [--work-dir DIR]
        [--kiltmini-index DIR --kiltmini-queries FILE] [--out FILE] [--png FILE]
    python -m benchmarks.scale --markdown [--out FILE]       # the README's tables, from the JSON

Synthetic data: unit vectors of dimension 1024 drawn around 1,000 cluster centres in a 64-dimensional latent
space, plus isotropic noise (real embeddings also have a low intrinsic dimension), written once as fp16
shards of 100k rows in --work-dir, queries drawn the same way; ground truth is the exact top-10 over the
first N rows. Each (type, N) point runs in a fresh process, one at a time, so its resident memory is its
own and is freed before the next: anonymous RSS (what the index holds) and file-backed RSS (pages of the
memory-mapped shards it touched) are reported apart. IVF types are trained once on a sample of the data
(the same for every N; `train_seconds`) and filled with the first N rows (`add_seconds`).
With --kiltmini-index (an index directory built from kiltmini with the default model) each type is also
built over the real embeddings and scored against Flat with kiltmini's real queries.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from searchrl.paths import ROOT  # noqa: E402
from searchrl.search.index.index_types import compact_code_size, top_k  # noqa: E402
from searchrl.search.index.shards import EmbeddingShards, write_shard  # noqa: E402
from searchrl.search.index_settings import DEFAULT_RERANK_DEPTH  # noqa: E402

TYPES = ["flat", "ivf-sq8", "compact", "exact"]
SIZES = [100_000, 500_000, 1_000_000, 2_000_000]
SHARD_ROWS = 100_000
NLIST = 1024
NPROBE = 64
TRAIN_SIZE = 100_000
BATCH = 64
FULL_KILT = 25_000_000
NODE_BYTES = 24 * 2**30
GPU_BYTES = 80 * 10**9
# Left for the OS, the query encoder and the server on a 24 GiB node.
NODE_HEADROOM = 4 * 2**30
LATENT, CENTRES, NOISE = 64, 1000, 0.14


def rss() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile", "VmHWM", "VmRSS"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


def factory_of(kind: str, dim: int, nlist: int) -> str | None:
    if kind == "flat":
        return "Flat"
    if kind == "ivf-sq8":
        return f"IVF{nlist},SQ8"
    if kind == "compact":
        return f"IVF{nlist},PQ{compact_code_size(dim)}"
    return None


# --- synthetic data ---------------------------------------------------------------------------------------


def synthetic(rng: np.random.Generator, n: int, centres: np.ndarray, lift: np.ndarray) -> np.ndarray:
    z = centres[rng.integers(0, len(centres), n)] + 0.5 * rng.standard_normal((n, LATENT), dtype=np.float32)
    x = z @ lift + NOISE * rng.standard_normal((n, lift.shape[1]), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def make_data(work: Path, n_max: int, dim: int, n_queries: int) -> list[Path]:
    folder = work / "data"
    folder.mkdir(parents=True, exist_ok=True)
    info = {"rows": n_max, "dim": dim, "queries": n_queries, "latent": LATENT, "centres": CENTRES, "noise": NOISE}
    paths = [folder / f"shard_{i:05d}.npy" for i in range((n_max + SHARD_ROWS - 1) // SHARD_ROWS)]
    record = folder / "data.json"
    if record.exists() and json.loads(record.read_text()) == info and all(p.exists() for p in paths):
        return paths
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((CENTRES, LATENT), dtype=np.float32)
    lift = rng.standard_normal((LATENT, dim), dtype=np.float32) / np.sqrt(LATENT)
    np.save(folder / "queries.npy", synthetic(rng, n_queries, centres, lift).astype(np.float32))
    for i, path in enumerate(paths):
        rows = min(SHARD_ROWS, n_max - i * SHARD_ROWS)
        write_shard(path, synthetic(rng, rows, centres, lift))
        print(f"data: shard {i + 1}/{len(paths)}", flush=True)
    record.write_text(json.dumps(info))
    return paths


def ground_truth(work: Path, paths: list[Path], sizes: list[int], k: int = 10) -> None:
    """Exact top-k of the queries over the first N rows, for every N, in one pass over the shards."""
    folder = work / "data"
    if all((folder / f"gt_{n}.npy").exists() for n in sizes):
        return
    queries = np.load(folder / "queries.npy")
    best_s = np.full((len(queries), k), -np.inf, np.float32)
    best_r = np.full((len(queries), k), -1, np.int64)
    offset = 0
    for path in paths:
        block = np.load(path).astype(np.float32)
        scores = queries @ block.T
        rows = np.broadcast_to(np.arange(offset, offset + len(block)), scores.shape)
        best_s, best_r = top_k(np.concatenate([best_s, scores], 1), np.concatenate([best_r, rows], 1), k)
        offset += len(block)
        for n in sizes:
            if n == offset:
                np.save(folder / f"gt_{n}.npy", best_r)
        print(f"ground truth: {offset} rows", flush=True)


def trained(work: Path, kind: str, paths: list[Path], dim: int, nlist: int) -> tuple[Path, float]:
    """The trained, empty IVF index of `kind` (trained once, reused for every N)."""
    import faiss

    from searchrl.search.index.faiss_index import training_sample

    path = work / f"trained_{kind}_{nlist}.faiss"
    record = path.with_suffix(".json")
    if path.exists() and record.exists():
        return path, json.loads(record.read_text())["train_seconds"]
    index = faiss.index_factory(dim, factory_of(kind, dim, nlist), faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.try_extract_index_ivf(index)
    if isinstance(faiss.downcast_index(ivf), faiss.IndexIVFPQ):
        faiss.downcast_index(ivf).do_polysemous_training = False
    sample = training_sample(paths, TRAIN_SIZE)
    started = time.perf_counter()
    index.train(sample)
    seconds = time.perf_counter() - started
    faiss.write_index(index, str(path))
    record.write_text(json.dumps({"train_seconds": seconds, "train_points": len(sample)}))
    print(f"trained {kind} in {seconds:.1f} s", flush=True)
    return path, seconds


# --- one point, in its own process ------------------------------------------------------------------------


def build_point(kind: str, n: int, work: Path, dim: int, nlist: int) -> dict:
    """Fill the (trained) index with the first n rows and save it; the exact type has nothing to build."""
    import faiss

    paths = sorted((work / "data").glob("shard_*.npy"))
    train_s, add_s = 0.0, 0.0
    if kind != "exact":
        if kind == "flat":
            index = faiss.index_factory(dim, "Flat", faiss.METRIC_INNER_PRODUCT)
        else:
            path = work / f"trained_{kind}_{nlist}.faiss"
            index = faiss.read_index(str(path))
            train_s = json.loads(path.with_suffix(".json").read_text())["train_seconds"]
        started = time.perf_counter()
        for shard in paths:
            take = min(SHARD_ROWS, n - index.ntotal)
            if take <= 0:
                break
            index.add(np.ascontiguousarray(np.load(shard, mmap_mode="r")[:take], dtype=np.float32))
        add_s = time.perf_counter() - started
        faiss.write_index(index, str(work / "point.faiss"))
    return {
        "train_seconds": round(train_s, 2),
        "add_seconds": round(add_s, 2),
        "build_seconds": round(train_s + add_s, 2),
        "build_peak_rss_bytes": rss()["VmHWM"],
    }


def serve_point(kind: str, n: int, work: Path, exact_queries: int) -> dict:
    """Open the saved index as a server would (fresh process) and search: resident memory, q/s, recall."""
    import faiss
    import torch  # noqa: F401  (imported before the baseline: its own memory is not the index's)

    from searchrl.search.index.rerank_index import RerankIndex
    from searchrl.search.index.torch_exact import ShardedExactIndex

    folder = work / "data"
    paths = sorted(folder.glob("shard_*.npy"))[: (n + SHARD_ROWS - 1) // SHARD_ROWS]
    queries = np.load(folder / "queries.npy")
    truth = np.load(folder / f"gt_{n}.npy")
    if kind in ("flat", "exact"):
        queries, truth = queries[:exact_queries], truth[:exact_queries]
    gc.collect()
    before = rss()
    if kind == "exact":
        index = ShardedExactIndex(EmbeddingShards(paths), ["cpu"])
    else:
        base = faiss.read_index(str(work / "point.faiss"))
        if kind != "flat":
            faiss.extract_index_ivf(base).nprobe = NPROBE
        index = RerankIndex(base, EmbeddingShards(paths), DEFAULT_RERANK_DEPTH) if kind == "compact" else base
    loaded = rss()
    index.search(queries[:BATCH], 10)  # warm-up: thread pools, first page faults
    started = time.perf_counter()
    rows = np.concatenate([index.search(queries[i : i + BATCH], 10)[1] for i in range(0, len(queries), BATCH)])
    search_s = time.perf_counter() - started
    after = rss()
    return {
        "rss_anon_bytes": loaded["RssAnon"] - before["RssAnon"],
        "rss_anon_bytes_after_search": after["RssAnon"] - before["RssAnon"],
        "rss_file_bytes_after_search": after["RssFile"] - before["RssFile"],
        "serve_peak_rss_bytes": after["VmHWM"],
        "queries": len(queries),
        "queries_per_s_batch64": round(len(queries) / search_s, 2),
        "one_recall_at_10": float(np.mean([truth[i, 0] in rows[i] for i in range(len(queries))])),
        "recall_10_at_10": float(np.mean([len(set(truth[i]) & set(rows[i])) / 10 for i in range(len(queries))])),
    }


def run_phase(phase: str, kind: str, n: int, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--point",
        phase,
        kind,
        str(n),
        "--work-dir",
        str(args.work_dir),
        "--dim",
        str(args.dim),
        "--nlist",
        str(args.nlist),
        "--exact-queries",
        str(args.exact_queries),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{phase} of {kind} at {n} failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- kiltmini: the real embeddings ------------------------------------------------------------------------


def kiltmini(index_dir: Path, queries_file: Path, work: Path) -> dict:
    """Each type over kiltmini's MiniLM shards, scored against Flat on kiltmini's real queries."""
    import faiss

    from searchrl.search.index.faiss_index import build_faiss_index, effective_factory
    from searchrl.search.index.index_types import compact_factory
    from searchrl.search.index.rerank_index import RerankIndex
    from searchrl.search.index.shards import shard_paths
    from searchrl.search.index.torch_exact import ShardedExactIndex
    from searchrl.search.local_faiss import LocalFaissBackend

    backend = LocalFaissBackend(index_dir)
    manifest = backend.manifest
    n, dim = manifest["passages"], manifest["dimension"]
    cache = work / f"kiltmini_queries_{manifest['corpus']['sha256'][:12]}.npy"
    if cache.exists():
        queries = np.load(cache)
    else:
        texts = [json.loads(line)["query"] for line in queries_file.read_text().splitlines() if line.strip()]
        queries = backend.encoder.encode_queries(texts)
        np.save(cache, queries)
    paths = shard_paths(index_dir, manifest["files"]["shards"])
    shards = EmbeddingShards(paths)
    factories = {
        "flat": "Flat",
        "ivf-sq8": effective_factory("IVF4096,SQ8", n),
        "compact": effective_factory(compact_factory(dim, n), n),
        "exact": None,
    }
    rows_by_type, out = {}, []
    for kind, factory in factories.items():
        started = time.perf_counter()
        if kind == "exact":
            # Every query batch scans all shards: at full speed they all sit in the page cache.
            index, index_bytes = ShardedExactIndex(shards, ["cpu"]), 2 * dim * n
        else:
            base = build_faiss_index(paths, dim, factory)
            if "IVF" in factory:
                faiss.ParameterSpace().set_index_parameter(base, "nprobe", NPROBE)
            empty = faiss.clone_index(base)
            empty.reset()
            index_bytes = len(faiss.serialize_index(base)) - len(faiss.serialize_index(empty))
            index = RerankIndex(base, shards, DEFAULT_RERANK_DEPTH) if kind == "compact" else base
        build_s = time.perf_counter() - started
        started = time.perf_counter()
        rows = np.concatenate([index.search(queries[i : i + BATCH], 10)[1] for i in range(0, len(queries), BATCH)])
        search_s = time.perf_counter() - started
        rows_by_type[kind] = rows
        flat_top1 = rows_by_type["flat"][:, 0]
        out.append(
            {
                "type": kind,
                "factory": factory,
                "build_seconds": round(build_s, 2),
                # What the index holds in RAM per vector, centroids and codebooks (fixed in n) left out.
                "resident_bytes_per_vector": round(index_bytes / n, 1),
                "shard_rows_read_per_query": {"compact": DEFAULT_RERANK_DEPTH, "exact": n}.get(kind, 0),
                "one_recall_at_10_vs_flat": float(np.mean([flat_top1[i] in rows[i] for i in range(len(rows))])),
                "queries_per_s_batch64": round(len(queries) / search_s, 1),
            }
        )
    flat_bytes = out[0]["resident_bytes_per_vector"]
    for row in out:
        row["resident_vs_flat"] = round(row["resident_bytes_per_vector"] / flat_bytes, 4)
    return {
        "passages": n,
        "dimension": dim,
        "model": manifest["model"],
        "queries": len(queries),
        "nprobe": NPROBE,
        "rerank_depth": DEFAULT_RERANK_DEPTH,
        "types": out,
    }


# --- projection and plot ----------------------------------------------------------------------------------


def flat_vs_matmul(work: Path) -> dict:
    """faiss Flat against a plain numpy product + top-k on the same 100k rows and 64 queries (best of 3)."""
    import faiss

    rows = np.load(sorted((work / "data").glob("shard_*.npy"))[0]).astype(np.float32)
    queries = np.load(work / "data" / "queries.npy")[:BATCH]
    index = faiss.IndexFlatIP(rows.shape[1])
    index.add(rows)
    ids = np.broadcast_to(np.arange(len(rows)), (len(queries), len(rows)))

    def best(run) -> float:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
        return round(len(queries) / min(times), 1)

    return {
        "rows": len(rows),
        "faiss_flat_queries_per_s": best(lambda: index.search(queries, 10)),
        "numpy_matmul_topk_queries_per_s": best(lambda: top_k(queries @ rows.T, ids, 10)),
    }


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y = a + b x."""
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(intercept), float(slope)


def resident_bytes(point: dict) -> int:
    # The exact type on CPU streams every shard per batch: its working set is the shards' page cache.
    if point["type"] == "exact":
        return point["rss_file_bytes_after_search"] + point["rss_anon_bytes_after_search"]
    return point["rss_anon_bytes"]


def project(points: list[dict], dim: int) -> list[dict]:
    out = []
    for kind in TYPES:
        mine = sorted((p for p in points if p["type"] == kind), key=lambda p: p["n"])
        if len(mine) < 2:
            continue
        ns = [p["n"] for p in mine]
        mem_a, mem_b = fit(ns, [resident_bytes(p) for p in mine])
        add_a, add_b = fit(ns, [p["add_seconds"] for p in mine])
        q_a, q_b = fit(ns, [1 / p["queries_per_s_batch64"] for p in mine])
        memory = mem_a + mem_b * FULL_KILT
        # On a GPU the index is its data structure: Flat fp32 (faiss-gpu), SQ8 codes, or the fp16 shards.
        gpu_per_vector = {"flat": 4 * dim, "ivf-sq8": dim + 8, "exact": 2 * dim, "compact": None}[kind]
        out.append(
            {
                "type": kind,
                "bytes_per_vector": round(mem_b, 1),
                "memory_at_25m_gib": round(memory / 2**30, 1),
                "build_hours_at_25m": round((mine[0]["train_seconds"] + add_a + add_b * FULL_KILT) / 3600, 2),
                "queries_per_s_at_25m": round(1 / max(q_a + q_b * FULL_KILT, 1e-9), 2),
                "max_vectors_24gib_node": int((NODE_BYTES - NODE_HEADROOM - mem_a) / mem_b) if mem_b > 0 else None,
                "max_vectors_80gb_gpu": int(GPU_BYTES * 0.9 / gpu_per_vector) if gpu_per_vector else None,
            }
        )
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points, projection = result["points"], {p["type"]: p for p in result["projection"]}
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    panels = [
        ("resident memory (GiB)", lambda p: resident_bytes(p) / 2**30, "memory_at_25m_gib"),
        ("build time (s, excl. encoding)", lambda p: p["build_seconds"], "build_hours_at_25m"),
        ("queries/s at batch 64", lambda p: p["queries_per_s_batch64"], "queries_per_s_at_25m"),
        ("1-recall@10 vs exact", lambda p: p["one_recall_at_10"], None),
    ]
    for ax, (title, value, key) in zip(axes.flat, panels, strict=True):
        for kind in TYPES:
            mine = sorted((p for p in points if p["type"] == kind), key=lambda p: p["n"])
            if not mine:
                continue
            line = ax.plot([p["n"] for p in mine], [value(p) for p in mine], "o-", label=kind)[0]
            if key and kind in projection:
                far = projection[kind][key] * (3600 if key == "build_hours_at_25m" else 1)
                ax.plot([mine[-1]["n"], FULL_KILT], [value(mine[-1]), far], "--", color=line.get_color())
        if key == "memory_at_25m_gib":
            ax.axhline(NODE_BYTES / 2**30, color="grey", lw=0.8, ls=":")
            ax.text(1.1e5, NODE_BYTES / 2**30 * 1.1, "24 GiB node", color="grey", fontsize=8)
            ax.axhline(GPU_BYTES / 2**30, color="grey", lw=0.8, ls=":")
            ax.text(1.1e5, GPU_BYTES / 2**30 * 1.1, "80 GB GPU", color="grey", fontsize=8)
        ax.set_xscale("log")
        if key:
            ax.set_yscale("log")
        ax.axvline(FULL_KILT, color="grey", lw=0.8)
        ax.set_title(title)
        ax.set_xlabel(f"vectors (dim {result['dimension']}); dashed: projection to 25M")
        ax.legend(fontsize=8)
    fig.suptitle(f"searchrl index types vs size ({result['date']}, {result['machine']['cpus']} CPU cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(result: dict) -> str:
    lines = [
        "| type | N | resident (GiB) | build s (train + add) | q/s batch 64 | 1-recall@10 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for p in sorted(result["points"], key=lambda p: (TYPES.index(p["type"]), p["n"])):
        lines.append(
            f"| {p['type']} | {p['n']:,} | {resident_bytes(p) / 2**30:.2f} | {p['build_seconds']:.0f} "
            f"({p['train_seconds']:.0f} + {p['add_seconds']:.0f}) | {p['queries_per_s_batch64']:,.1f} | "
            f"{p['one_recall_at_10']:.3f} |"
        )
    lines += [
        "",
        "| type | bytes/vector | at 25M (GiB) | build h at 25M | q/s at 25M | most vectors, 24 GiB node | "
        "most vectors, 80 GB GPU |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in result["projection"]:
        gpu = f"{p['max_vectors_80gb_gpu'] / 1e6:.1f}M" if p["max_vectors_80gb_gpu"] else "n/a (CPU type)"
        node = f"{p['max_vectors_24gib_node'] / 1e6:.1f}M" if p["max_vectors_24gib_node"] else "n/a"
        lines.append(
            f"| {p['type']} | {p['bytes_per_vector']:,.0f} | {p['memory_at_25m_gib']:,.1f} | "
            f"{p['build_hours_at_25m']} | {p['queries_per_s_at_25m']} | "
            f"{node} | {gpu} |"
        )
    if result.get("kiltmini"):
        lines += [
            "",
            "| type (kiltmini) | factory | resident bytes/vector | vs Flat | shard rows read per query | "
            "1-recall@10 vs Flat | q/s |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for t in result["kiltmini"]["types"]:
            lines.append(
                f"| {t['type']} | {t['factory'] or '-'} | {t['resident_bytes_per_vector']:,.0f} | "
                f"{t['resident_vs_flat']} | {t['shard_rows_read_per_query']:,} | "
                f"{t['one_recall_at_10_vs_flat']:.4f} | {t['queries_per_s_batch64']:,.0f} |"
            )
    return "\n".join(lines)


# --- driver -----------------------------------------------------------------------------------------------


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    p.add_argument("--types", default=",".join(TYPES))
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--queries", type=int, default=640, help="synthetic queries (IVF types search them all)")
    p.add_argument("--exact-queries", type=int, default=128, help="queries searched by the exact types")
    p.add_argument("--nlist", type=int, default=NLIST)
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/searchrl-scale"))
    p.add_argument("--kiltmini-index", type=Path, help="index directory built from kiltmini (keeps its shards)")
    p.add_argument("--kiltmini-queries", type=Path, help="kiltmini's queries.jsonl")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scale.json")
    p.add_argument("--png", type=Path, default=ROOT / "benchmarks" / "results" / "scale.png")
    p.add_argument("--markdown", action="store_true", help="print the README tables from --out and exit")
    p.add_argument("--point", nargs=3, metavar=("PHASE", "TYPE", "N"), help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.out.read_text())))
        return 0
    if args.point:
        phase, kind, n = args.point[0], args.point[1], int(args.point[2])
        if phase == "build":
            print(json.dumps(build_point(kind, n, args.work_dir, args.dim, args.nlist)))
        else:
            print(json.dumps(serve_point(kind, n, args.work_dir, args.exact_queries)))
        return 0
    import faiss

    sizes = sorted(int(s) for s in args.sizes.split(","))
    if any(n % SHARD_ROWS for n in sizes):
        raise SystemExit(f"--sizes: each must be a multiple of {SHARD_ROWS:,} (the synthetic shard size)")
    kinds = [t for t in args.types.split(",") if t]
    args.work_dir.mkdir(parents=True, exist_ok=True)
    paths = make_data(args.work_dir, sizes[-1], args.dim, args.queries)
    ground_truth(args.work_dir, paths, sizes)
    partial = args.work_dir / "points.jsonl"
    done = [json.loads(line) for line in partial.read_text().splitlines()] if partial.exists() else []
    for kind in kinds:
        if kind in ("ivf-sq8", "compact"):
            trained(args.work_dir, kind, paths, args.dim, args.nlist)
        for n in sizes:
            if any(p["type"] == kind and p["n"] == n for p in done):
                continue
            need = {"flat": 4, "ivf-sq8": 1, "compact": 0.1, "exact": 0.5}[kind] * n * args.dim
            if need > mem_available() * 0.8:
                print(f"skip {kind} at {n}: needs ~{need / 2**30:.1f} GiB, {mem_available() / 2**30:.1f} available")
                continue
            point = {"type": kind, "n": n, "factory": factory_of(kind, args.dim, args.nlist)}
            point |= run_phase("build", kind, n, args)
            point |= run_phase("serve", kind, n, args)
            (args.work_dir / "point.faiss").unlink(missing_ok=True)
            print(json.dumps(point), flush=True)
            done.append(point)
            with partial.open("a") as handle:
                handle.write(json.dumps(point) + "\n")
    result = {
        "date": dt.date.today().isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "faiss": faiss.__version__,
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        },
        "dimension": args.dim,
        "data": {
            "kind": "synthetic clustered",
            "latent_dim": LATENT,
            "centres": CENTRES,
            "noise": NOISE,
            "queries": args.queries,
            "exact_type_queries": args.exact_queries,
        },
        "settings": {
            "nlist": args.nlist,
            "nprobe": NPROBE,
            "train_size": TRAIN_SIZE,
            "rerank_depth": DEFAULT_RERANK_DEPTH,
            "batch": BATCH,
        },
        "points": sorted(done, key=lambda p: (TYPES.index(p["type"]), p["n"])),
    }
    result["projection"] = project(result["points"], args.dim)
    result["flat_vs_matmul_100k"] = flat_vs_matmul(args.work_dir)
    print(json.dumps(result["flat_vs_matmul_100k"]), flush=True)
    if args.kiltmini_index:
        if not args.kiltmini_queries:
            raise SystemExit("--kiltmini-queries: required with --kiltmini-index")
        result["kiltmini"] = kiltmini(args.kiltmini_index, args.kiltmini_queries, args.work_dir)
        print(json.dumps(result["kiltmini"]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    plot(result, args.png)
    print(markdown(result))
    print(f"wrote {args.out} and {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
