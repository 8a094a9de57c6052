"""Render docs/BENCHMARKS.md's tables from benchmarks/results/*.json, so the page cannot drift from the figures.

Each table sits between `<!-- table:NAME -->` and `<!-- /table -->`; everything outside the markers is kept
as written. Every table starts with the line naming its JSON, the date it records and the machine.

    python -m benchmarks.tables            # rewrite the tables in docs/BENCHMARKS.md
    python -m benchmarks.tables --check    # exit 1 when the committed page differs from the JSON
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from searchrl.paths import ROOT

RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "BENCHMARKS.md"
BLOCK = re.compile(r"(<!-- table:([a-z0-9-]+) -->\n)(.*?)(<!-- /table -->)", re.S)
GIB = 1024**3


def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text())


def save(result: dict[str, Any], out: Path) -> None:
    """A benchmark's figures as the JSON these tables read."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")


def machine(m: Any) -> str:
    """The JSON's `machine` field in words: a string as written, a dict by its known keys."""
    if isinstance(m, str):
        return m
    parts = []
    if "cpus" in m:
        parts.append(f"{m['cpus']} CPU cores")
    if "memory_gib" in m:
        parts.append(f"{m['memory_gib']} GiB")
    if "gpus" in m:
        parts.append(f"{len(m['gpus'])} GPUs" if m["gpus"] else "no GPU")
    parts += [f"{k} {m[k]}" for k in ("torch", "faiss") if k in m]
    return ", ".join(parts)  # the platform string stays in the JSON


def source(name: str, data: dict[str, Any], what: str = "") -> str:
    date = data.get("date") or "undated (the JSON records no date)"
    return f"*`{name}.json`, {date}, {machine(data.get('machine', 'machine not recorded'))}.{what}*"


def num(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.{digits}f}"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def encode() -> str:
    d = load("encode")
    dev = d["devices"][0]
    pad = dev["padded_tokens"]
    rounds = len(dev["raw_passages_per_s"])
    head = source(
        "encode",
        d,
        f" {dev['passages']} held-out passages (lines {d['slice']['offset']} on of `{d['slice']['corpus']}`), "
        f"{d['model']}, {dev['device']}, batch {dev['batch_size']}, {rounds} rounds alternating which runs first",
    )
    builders = dev.get("builders") or {
        dev.get("builder_backend", "torch"): {
            "passages_per_s": dev["builder_passages_per_s"],
            "median_ratio_to_raw": dev["median_ratio"],
        }
    }

    def median(r: list[float]) -> str:
        return num(sorted(r)[len(r) // 2])

    rows = [
        ("raw `SentenceTransformer.encode(texts)`", median(dev["raw_passages_per_s"]), "-"),
        *(
            (
                f"builder, {name} encoder (to fp16 shards, model load excluded)",
                median(b["passages_per_s"]),
                f"**{num(b['median_ratio_to_raw'], 2)}**",
            )
            for name, b in builders.items()
        ),
        (
            f"previous builder's way ({dev['batch_size']} passages per call, corpus order)",
            median(dev["unsorted_per_batch_passages_per_s"]),
            f"{num(dev['unsorted_ratio_of_medians'], 2)} (ratio of medians)",
        ),
    ]
    body = table(["", "median passages/s", "/ raw, median of the rounds' ratios"], rows)
    padding = "Tokens computed for the slice: " + "; ".join(f"{k} {v:,}" for k, v in pad.items()) + "."
    return "\n\n".join([head, body, padding])


def scale() -> str:
    from benchmarks.scale import resident_bytes  # one definition: for `exact`, the shard pages it scans

    d = load("scale")
    s, data = d["settings"], d["data"]
    head = source(
        "scale",
        d,
        f" {data['kind']} unit vectors of dimension {d['dimension']:,} ({data['centres']:,} centres in a "
        f"{data['latent_dim']}-dimensional latent space, noise {data['noise']}); IVF nlist {s['nlist']:,} trained on "
        f"{s['train_size']:,} points, nprobe {s['nprobe']}; compact re-scores {s['rerank_depth']} candidates; "
        f"{data['queries']} queries ({data['exact_type_queries']} for flat and exact), batch {s['batch']}",
    )
    rows = [
        (
            p["type"],
            f"{p['n']:,}",
            num(resident_bytes(p) / GIB, 2),
            f"{p['build_seconds']:,.0f} ({p['train_seconds']:,.0f} + {p['add_seconds']:,.0f})",
            num(p["queries_per_s_batch64"]),
            num(p["one_recall_at_10"], 3),
            num(p["build_peak_rss_bytes"] / GIB, 2),
            num(p["rss_file_bytes_after_search"] / GIB, 2),
        )
        for p in d["points"]
    ]
    body = table(
        [
            "type",
            "N",
            "resident (GiB)",
            "build s (train + add)",
            f"q/s batch {s['batch']}",
            "1-recall@10",
            "build peak RSS (GiB)",
            "file-backed RSS after search (GiB)",
        ],
        rows,
    )
    f = d["flat_vs_matmul_100k"]
    flat = table(
        [f"search over {f['rows']:,} rows", "q/s"],
        [
            ("faiss-cpu Flat", num(f["faiss_flat_queries_per_s"])),
            ("numpy product + top-k", num(f["numpy_matmul_topk_queries_per_s"])),
        ],
    )
    return f"{head}\n\n{body}\n\n{flat}"


def millions(n: int | None) -> str:
    return "n/a (CPU type)" if n is None else f"{n / 1e6:,.1f}M"


def scale_projection() -> str:
    d = load("scale")
    rows = [
        (
            p["type"],
            f"{p['bytes_per_vector']:,.0f}",
            num(p["memory_at_25m_gib"]),
            num(p["build_hours_at_25m"], 2),
            num(p["queries_per_s_at_25m"], 2),
            millions(p["max_vectors_24gib_node"]),
            millions(p["max_vectors_80gb_gpu"]),
        )
        for p in d["projection"]
    ]
    body = table(
        [
            "type",
            "bytes/vector",
            "at 25M (GiB)",
            "build h at 25M",
            "q/s at 25M",
            "most vectors, 24 GiB node",
            "most vectors, 80 GB GPU",
        ],
        rows,
    )
    return f"{source('scale', d, ' Projection: a least-squares line through the measured points.')}\n\n{body}"


def scale_kiltmini() -> str:
    d = load("scale")
    k = d["kiltmini"]
    head = source(
        "scale",
        d,
        f" {k['model']} embeddings of kiltmini ({k['passages']:,} passages, {k['dimension']} dims, "
        f"{k['queries']:,} queries), nprobe {k['nprobe']}, compact re-scores {k['rerank_depth']}",
    )
    rows = [
        (
            t["type"],
            t["factory"] or "-",
            f"{t['resident_bytes_per_vector']:,.0f}",
            f"{t['shard_rows_read_per_query']:,}",
            num(t["one_recall_at_10_vs_flat"], 4),
            f"{t['queries_per_s_batch64']:,.0f}",
        )
        for t in k["types"]
    ]
    body = table(
        [
            "type",
            "factory",
            "resident bytes/vector",
            "shard rows read per query",
            "1-recall@10 vs Flat",
            "q/s",
        ],
        rows,
    )
    return f"{head}\n\n{body}"


def hybrid() -> str:
    d = load("hybrid")
    c = d["hybrid_config"]
    head = source(
        "hybrid",
        d,
        f" kiltmini, {d['passages']:,} passages, {d['queries']:,} queries; recall of BGE-large's top-1; fusion "
        f"weights {c['dense_weight']:g} and {c['bm25_weight']:g}, `rrf_k` {c['rrf_k']:g}, depth {c['depth']}; "
        "q/s in process at batch 64",
    )
    names = {"dense": f"dense ({d['model']}, {d['index_type']})", "bm25": "BM25 (bm25s)", "hybrid": "hybrid (RRF)"}
    ks = list(d["recall_of_bge_top1"]["dense"])
    rows = [
        (names[r], *(num(rec[k], 3) for k in ks), num(d["queries_per_s_batch64"][r]))
        for r, rec in d["recall_of_bge_top1"].items()
    ]
    body = table(["retriever", *(f"recall{k}" for k in ks), "q/s"], rows)
    best = max(d["sweep"], key=lambda r: r["@5"])
    sweep = table(
        ["sweep (for information: picked on the same queries)", "bm25_weight", "rrf_k", "recall@5"],
        [(f"best of {len(d['sweep'])} settings", best["bm25_weight"], best["rrf_k"], num(best["@5"], 3))],
    )
    return f"{head}\n\n{body}\n\n{sweep}"


def retrieval() -> str:
    d = load("retrieval")
    p = d["search_params"]
    head = source(
        "retrieval",
        d,
        f" kiltmini, {d['passages']:,} passages, {d['queries']:,} queries, {d['model']} ({d['dimension']} dims), "
        f"nprobe {p['nprobe']}, efSearch {p['efSearch']}; "
        f"encoding ran at {num(d['encode_passages_per_s'])} passages/s",
    )
    rows = [
        (
            t["factory"],
            t["effective_factory"],
            f"{t['marginal_bytes_per_vector']:,.0f} ({t['bytes_per_vector']:,.0f})",
            f"{t['build_seconds']:.2f} ({t['train_seconds']:.2f} + {t['add_seconds']:.2f})",
            num(t["one_recall_at_10_vs_flat"], 3),
            num(t["r1_top1_recall"]["@5"], 3),
            f"{t['batched_search_queries_per_s']:,.0f}",
        )
        for t in d["index_types"]
    ]
    body = table(
        [
            "factory",
            "effective",
            "bytes/vector marginal (serialized)",
            "build s (train + add)",
            "1-recall@10 vs Flat",
            "R1 top-1 recall@5",
            "batched q/s",
        ],
        rows,
    )
    return f"{head}\n\n{body}"


def retrieval_projection() -> str:
    d = load("retrieval")
    pr = d["projection_full_kilt"]
    head = source(
        "retrieval",
        d,
        f" Projection to {pr['passages'] / 1e6:,.0f}M passages of {pr['model']} ({pr['dimension']:,} dims): "
        f"{pr['note']}",
    )
    body = table(
        ["factory", "bytes/vector", "memory (GiB)", "train h", "add h"],
        [
            (
                t["factory"],
                f"{t['bytes_per_vector']:,.0f}",
                num(t["memory_gib"]),
                num(t["train_hours"], 2),
                num(t["add_hours"], 2),
            )
            for t in pr["index_types"]
        ],
    )
    enc = table(
        ["encoding the projected corpus on this CPU", "hours"],
        [
            ("MiniLM", num(pr["encode_hours_minilm_this_cpu"])),
            ("bge-large", num(pr["encode_hours_bge_large_this_cpu"])),
        ],
    )
    return f"{head}\n\n{body}\n\n{enc}"


def _in_process_key(row: dict[str, Any], threads: int) -> str | None:
    return next((k for k in row if k.startswith(f"in-process, {threads} thread") and "idle" not in k), None)


def _idle_key(row: dict[str, Any]) -> str | None:
    return next((k for k in row if k.startswith("in-process, 1 thread") and "idle" in k), None)


def _paired(rounds: dict[str, list[float]], ours: str, theirs: str | None) -> str:
    """The median over rounds of ours / theirs within each round (both measured minutes apart)."""
    if theirs is None or theirs not in rounds or ours not in rounds:
        return "n/a"
    ratios = sorted(a / b for a, b in zip(rounds[ours], rounds[theirs], strict=True) if b)
    if not ratios:
        return "n/a"
    mid = len(ratios) // 2
    return num(ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2, 2)


PEERS = ("Search-R1", "R1-Searcher")


def _server_rates(name: str, s: dict[str, Any], peers: bool = True) -> tuple[list[str], list[str]]:
    """The header and the rates (CPU per request beside each) of a side-by-side server run, and the server names;
    `peers=False` leaves out the peers' rows (a run whose project rows a later run supersedes)."""
    held = s["held_out"]
    head = source(
        name,
        s,
        f" {s['passages']} held-out passages (lines {held['offset']} on of `{held['corpus']}`), flat, "
        f"{s['queries']:,} real queries one per request, top {s['top_k']}, no cache; medians of "
        f"{s['rounds']} rounds of {s['seconds_per_block']:g} s blocks"
        + (f", each after {s['settle_seconds']:g} s unmeasured" if s.get("settle_seconds") else "")
        + f"; load average {s['load_average'][0]} before, {s['load_average'][1]} after",
    )
    med, cpu = s["median_requests_per_s"], s["median_cpu_ms_per_request"]
    levels = list(med)
    names = [k for k in med[levels[0]] if not k.startswith(("in-process", *(() if peers else PEERS)))]
    if not peers:  # the peers' endpoints, measured for the peers' sake
        names = [k for k in names if k not in ("searchrl /retrieve", "searchrl /queries")]

    def cell(c: str, key: str | None) -> str:
        rate, used = med[c].get(key or ""), cpu[c].get(key or "")
        return num(rate) + ("" if used is None else f" ({num(used, 2)})")

    def row(label: str, key_of: Callable[[str], str | None]) -> tuple:
        return (label, *(cell(c, key_of(c)) for c in levels))

    in_process = [
        row(
            f"in-process, {t} thread{'s' * (t > 1)}, batch min(c, {s['max_batch']})",
            lambda c, t=t: _in_process_key(med[c], t),
        )
        for t in s["in_process_threads"]
    ] + [
        row(f"in-process, 1 thread, lone queries, {idle.partition(', batch 1, ')[2]}", lambda c: _idle_key(med[c]))
        for idle in filter(None, [_idle_key(med[levels[0]])])
    ]
    rates = table(
        ["requests/s (server CPU ms per request; in process: per query), medians, at concurrency", *levels],
        [row(n, lambda c, n=n: n) for n in names] + in_process,
    )
    return [head, rates], names


def retrieval_server() -> str:
    s = load("retrieval")["servers"]
    (head, rates), names = _server_rates("retrieval", s, peers=False)
    levels = list(s["median_requests_per_s"])
    rounds = s["requests_per_s"]
    one = "searchrl --threads 1"
    ratios = table(
        [
            "concurrency",
            "`/search` / in-process, 2 threads",
            "`--threads 1` / in-process, 1 thread",
            "`--threads 1` / in-process with idle between calls, 1 thread",
            "`--threads 2` / in-process, 2 threads",
        ],
        [
            (
                c,
                f"**{_paired(rounds[c], 'searchrl /search', _in_process_key(rounds[c], 2))}**",
                f"**{_paired(rounds[c], one, _in_process_key(rounds[c], 1))}**",
                _paired(rounds[c], one, _idle_key(rounds[c])),
                _paired(rounds[c], "searchrl --threads 2", _in_process_key(rounds[c], 2)),
            )
            for c in levels
        ],
    )
    shares = s.get("median_every_core_share") or {}
    lent_names = [n for n in dict.fromkeys(n for row in shares.values() for n in row) if n in names]
    values = {v for row in shares.values() for v in row.values()}
    if len(values) == 1:
        lent = f"Backend calls on every core: {num(values.pop(), 2)} (median share of blocks) in every run."
    else:
        lent = table(
            ["share of backend calls on every core (median of blocks) at concurrency", *levels],
            [(n, *(num(shares.get(c, {}).get(n), 2) for c in levels)) for n in lent_names],
        )
    note = "Ratios: the median over rounds of the ratio within a round."
    parts = [head, rates, note, ratios] + ([lent] if lent_names else [])
    wake = s.get("idle_wake_cost")
    if wake:
        cost = wake["server_cpu_ms_per_request"]
        parts.append(
            f"Server CPU ms per `{wake['endpoint']}` (event loop only), median of {wake['blocks']} blocks: "
            f"{num(cost['back_to_back'], 2)} back to back, {num(cost['after_idle'], 2)} with {wake['idle_ms']:g} ms "
            f"idle between requests ({num(cost['after_idle'] / cost['back_to_back'], 1)}x)."
        )
    return "\n\n".join(parts)


def retrieval_encoder() -> str:
    s = load("retrieval_encoder")["servers"]
    parts, _ = _server_rates("retrieval_encoder", s)
    rounds = s["requests_per_s"]
    torch_ = "searchrl --encoder-backend torch"
    ratios = table(
        [
            "concurrency",
            "`/retrieve` / Search-R1, as shipped",
            "`/queries` / R1-Searcher, as shipped",
            "`--threads 1` / Search-R1, 1 thread",
            "`--threads 1` / R1-Searcher, 1 thread",
            "`/search` (`auto`) / `--encoder-backend torch`",
            "`/search` (`auto`) / `--encoder-backend onnx`",
            "`onnx-int8` / `--encoder-backend torch`",
        ],
        [
            (
                c,
                f"**{_paired(rounds[c], 'searchrl /retrieve', 'Search-R1 /retrieve')}**",
                f"**{_paired(rounds[c], 'searchrl /queries', 'R1-Searcher /queries')}**",
                _paired(rounds[c], "searchrl --threads 1", "Search-R1 /retrieve (1 thread)"),
                _paired(rounds[c], "searchrl --threads 1", "R1-Searcher /queries (1 thread)"),
                _paired(rounds[c], "searchrl /search", torch_),
                _paired(rounds[c], "searchrl /search", "searchrl --encoder-backend onnx"),
                _paired(rounds[c], "searchrl --encoder-backend onnx-int8", torch_),
            )
            for c in rounds
        ],
    )
    note = "Ratios: the median over rounds of the ratio within a round."
    return "\n\n".join([*parts, note, ratios])


def encoder_backends() -> str:
    d = load("encoder_backends")
    lone = d["lone_query"]
    head = source(
        "encoder_backends",
        d,
        f" kiltmini, {d['passages']:,} passages, {d['queries']:,} real queries, {d['model']}, Flat index; each "
        f"index built and queried with its backend (PyTorch's queries run on the fp32 index); lone queries: "
        f"{len(lone['queries_per_s']['torch'])} alternating rounds, medians, {d['machine']['torch_threads']} threads",
    )
    names = list(d["recall_at_10_vs_fp32"])
    body = table(
        [
            "encoder backend",
            "recall@10 vs fp32 ONNX",
            "same top-10 as fp32",
            "R1-Searcher's top-1 in top-1 / 3 / 10",
            "index build encode s",
            "lone queries/s",
            "vs PyTorch",
        ],
        [
            (
                f"`{n}`",
                f"**{num(d['recall_at_10_vs_fp32'][n], 3)}**",
                num(d["same_top_10_vs_fp32"][n], 3),
                " / ".join(num(v, 3) for v in d["r1_top1_recall"][n].values()),
                num(d["build"].get(n, {}).get("encode_seconds")),
                num(lone["median_queries_per_s"][n]),
                num(lone["median_ratio_to_torch"][n], 2),
            )
            for n in names
        ],
    )
    return f"{head}\n\n{body}"


def import_shrink() -> str:
    d = load("import_index")
    c, srv = d["conversion"], d["serve"]
    head = source(
        "import_index",
        d,
        f" {d['data']}; {d['queries']} queries, batch 64; compact: {c['factory']} trained on "
        f"{d['train_size']:,} vectors, nprobe {d['nprobe']}, {d['rerank_depth']} re-scored from fp16 shards",
    )
    gib = 2**30
    body = table(
        ["served", "resident (GiB)", "q/s batch 64", "recall@10 vs Flat"],
        [
            (
                name,
                num(v["resident_bytes"] / gib, 3),
                num(v["queries_per_s_batch64"]),
                f"**{num(v['recall_at_10_vs_flat'], 4)}**",
            )
            for name, v in srv.items()
        ],
    )
    conversion = table(
        ["conversion", "vectors to fp16 shards (s)", "compact build (s)", "peak memory (GiB)", "Flat file (GiB)",
         "compact index (GiB)", "fp16 shards (GiB)"],
        [("`--index-type compact`", num(c["shards_seconds"]), num(c["compact_build_seconds"]),
          num(c["peak_rss_bytes"] / gib, 2), num(c["flat_file_bytes"] / gib, 2),
          num(c["compact_index_bytes"] / gib, 3), num(c["shard_bytes"] / gib, 2))],
    )  # fmt: skip
    projection = table(
        ["projected resident memory", "Flat (GiB)", "compact (GiB)", "fp16 shards on disk (GiB)"],
        [
            (name, num(p["flat_gib"]), num(p["compact_gib"], 2), num(p["fp16_shards_on_disk_gib"]))
            for name, p in d["projection"].items()
        ],
    )
    return "\n\n".join([head, body, conversion, projection])


def threads() -> str:
    d = load("threads")
    head = source(
        "threads",
        d,
        f" {d['encoder']}; {d['rounds']} rounds of alternating {d['seconds_per_block']:g} s blocks, medians; "
        f"1-minute load average {d['load_average'][0]} before, {d['load_average'][1]} after",
    )
    other = d["beside_other_load"]
    batches = list(other)
    shares = list(other[batches[0]])
    lend = table(
        ["q/s (CPU ms per query); another process keeps busy"]
        + [f"batch {b}: {t}" for b in batches for t in other[b][shares[0]] if t != "every_core_over_one_fewer"],
        [
            (
                f"{float(share):g} of a core",
                *(
                    f"{v['queries_per_s']:,.1f} ({v['cpu_ms_per_query']:.2f})"
                    for b in batches
                    for k, v in other[b][share].items()
                    if k != "every_core_over_one_fewer"
                ),
            )
            for share in shares
        ],
    )
    spin = d["spin_count"]
    names = list(next(iter(spin.values())))
    spins = table(
        ["every core, q/s (CPU ms per query)", *names],
        [
            (point, *(f"{v[n]['queries_per_s']:,.1f} ({v[n]['cpu_ms_per_query']:.2f})" for n in names))
            for point, v in spin.items()
        ],
    )
    return f"{head}\n\n{lend}\n\n{spins}"


def reward_server() -> str:
    d = load("reward_server")
    head = source(
        "reward_server",
        d,
        f" Preset `{d['preset']}`, real trajectories ({d['body_bytes_mean'] / 1000:,.1f} KB bodies), "
        f"{d['seconds_per_point']:g} s per point; target: {d['target']}",
    )
    errors = any(p[k]["errors"] for p in d["points"] for k in ("reward", "trivial", "trivial_validated", "echo"))
    rows = []
    for p in d["points"]:
        r, t, v, e = p["reward"], p["trivial"], p["trivial_validated"], p["echo"]
        rows.append(
            (
                f"{p['workers']} / {p['concurrency']}",
                f"{r['rps']:,.0f}",
                f"{num(r['p50_ms'])} / {num(r['p99_ms'])}",
                f"{e['rps']:,.0f}",
                f"{t['rps']:,.0f}",
                f"{v['rps']:,.0f}",
                f"**{num(p['ratio_to_echo'], 2)}**",
                f"{r['server_cpu_us_per_request']:,.0f} / {e['server_cpu_us_per_request']:,.0f} / "
                f"{t['server_cpu_us_per_request']:,.0f}",
            )
            + ((r["errors"],) if errors else ())
        )
    body = table(
        [
            "workers / concurrency",
            "reward req/s",
            "p50 / p99 ms",
            "FastAPI echo req/s",
            "trivial req/s",
            "trivial + validation req/s",
            "ratio to echo",
            "server CPU µs/request, reward / echo / trivial",
        ]
        + (["errors"] if errors else []),
        rows,
    )
    met = ", ".join(f"{w} worker(s) {'met' if ok else 'not met'}" for w, ok in d["target_met"].items())
    cpu64 = ", ".join(
        f"{p['workers']} worker(s) {num(p['cpu_ratio_to_echo'], 2)}" for p in d["points"] if p["concurrency"] == 64
    )
    body += f"\n\nTarget at concurrency 64: {met}. Echo CPU / reward CPU per request at 64: {cpu64}." + (
        "" if errors else " No request failed."
    )
    parts = [head, body, reward_breakdown(d), reward_instructions(d)]
    return "\n\n".join(part for part in parts if part)


def _served_cpu_at_64(d: dict) -> dict[str, float]:
    """Server CPU µs per request of each endpoint, one worker at concurrency 64."""
    at64 = next(p for p in d["points"] if p["concurrency"] == 64 and p["workers"] == 1)
    return {
        "reward endpoint": at64["reward"]["server_cpu_us_per_request"],
        "trivial endpoint": at64["trivial"]["server_cpu_us_per_request"],
        "FastAPI echo endpoint": at64["echo"]["server_cpu_us_per_request"],
    }


def reward_instructions(d: dict) -> str:
    """Instructions per request (callgrind), served and in process, beside the served CPU of the same endpoints."""
    ins = d.get("instructions")
    if not ins:
        return ""
    cpu = _served_cpu_at_64(d)
    head = (
        f"*Instructions: `python -m benchmarks.reward_instructions`, {ins['date']}, {ins['tool']}: the server "
        f"process's user-space instructions, {ins['served_requests']:,} requests per endpoint served at concurrency "
        f"{ins['concurrency']}, {ins['in_process_requests']:,} in process*"
    )
    counts = table(
        [
            "per single-sample request",
            "instructions, served",
            "instructions, in process",
            "instructions per µs of served CPU",
        ],
        [
            (
                name,
                f"{ins['served'][name]:,}",
                f"{ins['in_process'][name]:,}",
                f"{ins['served'][name] / cpu[name]:,.0f}",
            )
            for name in ins["served"]
        ],
    )
    own = ins["reward_own_work_by_kind"]
    total = sum(own.values())
    kinds = table(
        ["the reward endpoint's own work (reward less trivial, in process), by kind", "instructions", "share"],
        [(kind, f"{v:,}", f"{100 * v / total:.0f}%") for kind, v in own.items()] + [("all", f"{total:,}", "100%")],
    )
    return f"{head}\n\n{counts}\n\n{kinds}"


def reward_breakdown(d: dict) -> str:
    """The in-process costs beside the served ones: what the app spends, and what uvicorn and TCP add."""
    costs = d.get("in_process_us_per_request")
    if not costs:
        return ""
    served = _served_cpu_at_64(d)
    rows = []
    for name, us in costs.items():
        if name in served:
            rows.append((name, num(us), num(served[name]), num(served[name] - us)))
        else:
            rows.append((f"step: {name}", num(us), "", ""))
    return table(
        [
            "CPU µs per single-sample request",
            "in process, through ASGI (no sockets)",
            "served, 1 worker, concurrency 64",
            "difference: uvicorn, TCP, event loop",
        ],
        rows,
    )


def load_table() -> str:
    d = load("load")
    a = d["args"]
    rows_in = [*d["reward"], *d["search"], *d.get("libraries", [])]
    clean = all(r["lost"] == 0 and r["wrong"] == 0 for r in rows_in)
    head = source(
        "load",
        d,
        f" {a['reward_requests']:,} reward requests and {a['search_requests']:,} distinct searches per level, the "
        f"last level again after {a['idle_s']:g} s idle; answers checked against in-process results"
        + ("; **none lost or wrong**" if clean else "")
        + f"; load average at the end {d['load_average_1m_at_end']}",
    )
    rows = [
        (r["client"], r["phase"], f"{r['concurrency']:,}")
        + (() if clean else (f"{r['sent']:,}", r["lost"], r["wrong"]))
        + (num(r["p50_ms"]), num(r["p99_ms"]), num(r["max_ms"]), num(r["rps"]))
        for r in rows_in
    ]
    header = ["client", "phase", "concurrency"] + ([] if clean else ["sent", "lost", "wrong"])
    body = table([*header, "p50 ms", "p99 ms", "max ms", "req/s"], rows)
    return f"{head}\n\n{body}"


def restart() -> str:
    d = load("restart")
    runs = d["runs"]
    first = next(iter(runs.values()))
    head = source(
        "restart",
        first,
        f" A burst at concurrency {first['concurrency']:,} through the clients, the server killed -9 once a fifth was "
        "answered and restarted *down s* later; outage: kill to healthy; load average at the end "
        + ", ".join(f"{run['load_average_1m_at_end']} ({label})" for label, run in runs.items()),
    )
    rows = [
        (
            label,
            r["client"],
            num(r["down_s"], 0),
            num(r["outage_s"]),
            f"{r['sent']:,}",
            f"{r['lost']:,}",
            r["wrong"],
            "n/a" if r["scored_twice"] is None else r["scored_twice"],
            num(r["p99_ms"], 0),
            num(r["rps"]),
        )
        for label, run in runs.items()
        for r in run["rows"]
    ]
    header = ["run", "client", "down s", "outage s", "sent", "lost", "wrong", "scored twice", "p99 ms", "req/s"]
    return f"{head}\n\n{table(header, rows)}"


def serve() -> str:
    """The retrieval server through Ray Serve against the plain server (benchmarks/serve.py)."""
    d = load("serve")
    st = d["settings"]
    head = source(
        "serve",
        d,
        f" {st['passages']} held-out kiltmini passages, Flat, one query a request; medians of {st['rounds']} rounds, "
        f"ratios taken within a round; {d['errors']} errors",
    )
    rows = []
    for c, rates in d["requests_per_s"].items():
        r, p50 = d["ratios"][c], d["p50_ms"][c]
        two = rates.get("Serve, 2 replicas")
        rows.append(
            (
                c,
                num(rates["plain server"]),
                num(rates["Serve, 1 replica"]),
                "n/a" if two is None else num(two),
                num(r["Serve 1 replica / plain"], 2),
                num(r.get("Serve 2 replicas / 1 replica"), 2),
                f"{num(p50['plain server'])} / {num(p50['Serve, 1 replica'])}",
            )
        )
    header = ["callers", "plain req/s", "Serve 1 req/s", "Serve 2 req/s", "1 / plain", "2 / 1", "p50 ms plain / 1"]
    return f"{head}\n\n{table(header, rows)}"


def index_recall() -> str:
    d = load("index_recall")
    head = source(
        "index_recall",
        d,
        f" {d['passages']} mixed passages, {d['questions']:,} held-out questions; before: nprobe "
        f"{d['before']['nprobe']}, efSearch {d['before']['ef_search']}, {d['before']['rerank_depth']} re-scored. "
        f"Target: {d['target']}; met: {d['target_met']}",
    )
    rows = [
        (
            r["case"],
            f"{r['index_type']} {r['factory'] or ''}".strip(),
            ", ".join(f"{k} {v}" for k, v in r["search_params"].items()) or "-",
            num(r["measured_recall"], 4),
            num(r["held_out_kept"], 4),
            num(r["held_out_kept_before"], 4),
            r["settings_tried"],
            num(r["made_seconds"]),
        )
        for r in d["cases"]
    ]
    header = [
        "case",
        "index",
        "measured settings",
        "measured recall",
        "held-out kept",
        "held-out kept before",
        "settings tried",
        "made in s",
    ]
    return f"{head}\n\n{table(header, rows)}"


def index_recall_100k() -> str:
    d = load("index_recall_100k")
    head = source(
        "index_recall_100k",
        d,
        f" {d['passages']:,} passages ({d['real_passages']:,} real, the rest synthetic); {d['factory']}; "
        f"{d['tuning_questions']} tuning, {d['held_out_questions']} held-out questions. Target met: {d['target_met']}",
    )
    rows = [
        (
            r["case"],
            f"{r['queries']:,} {'generated' if r['generated'] else 'questions'}",
            r["measured_target"],
            num(r["measured_recall"], 4),
            r["search_params"].get("nprobe", "-"),
            num(r["held_out_kept"], 4),
            num(r["held_out_kept_before"], 4),
            r["target_met"],
        )
        for r in d["cases"]
    ]
    before = f"at nprobe {d['before']['nprobe']}"
    header = ["case", "tuned on", "target", "measured recall", "nprobe", "held-out kept", before, "met"]
    return f"{head}\n\n{table(header, rows)}"


def reward_keys() -> str:
    d = load("reward_keys")
    once = all(r["shared store"]["log_lines"] == r["shared store"]["log_keys_distinct"] for r in d["points"])
    head = source(
        "reward_keys",
        d,
        f" Keyed requests with a score log; baseline commit {d['baseline_commit'][:7]} (keys in each worker's "
        f"memory), alternating {d['seconds_per_point']:g} s slices. Target: {d['target']}; met: {d['target_met']}"
        + ("; each key logged once at every point" if once else ""),
    )
    rows = [
        (
            r["workers"],
            r["concurrency"],
            num(r["baseline"]["rps"], 0),
            num(r["shared store"]["rps"], 0),
            num(r["ratio"], 3),
            num(r["baseline"]["server_cpu_us_per_request"], 0),
            num(r["shared store"]["server_cpu_us_per_request"], 0),
            num(r["shared store"]["p50_ms"]),
        )
        + (() if once else (r["shared store"]["log_lines"] == r["shared store"]["log_keys_distinct"],))
        for r in d["points"]
    ]
    header = [
        "workers",
        "concurrency",
        "baseline req/s",
        "store req/s",
        "ratio",
        "baseline CPU us/req",
        "store CPU us/req",
        "store p50 ms",
    ] + ([] if once else ["each key logged once"])
    return f"{head}\n\n{table(header, rows)}"


def rollout() -> str:
    d = load("rollout")
    o, b = d["overhead_per_step"], d["replayed_batch"]
    mq = b["multi_query"]
    rows = [
        (
            "environment overhead per step, mean (p99)",
            f"{o['mean_ms']:.3f} ms ({o['p99_ms']:.3f} ms) over {o['steps']:,} steps; "
            f"target < {o['target_ms']:g} ms {'met' if o['target_met'] else 'not met'}",
        ),
    ]
    for label, r in (("retrieval per request", b["per_request"]), ("batched through the server", b["batched"])):
        rows.append(
            (
                f"{r['episodes']} replayed episodes, {label}",
                f"{r['seconds']:.2f} s ({r['episodes_per_s']:.1f} episodes/s)",
            )
        )
    rows.append(("batched / per request, speed-up", f"{b['speedup']:.3f}x"))
    for label, r in (("single-query steps", mq["single_query"]), ("one multi-query block", mq["multi_query"])):
        rows.append(
            (
                f"{r['episodes']} scripted episodes, {label}",
                f"{r['seconds']:.2f} s; {r['searches_per_episode']:g} search steps, "
                f"{r['queries_per_episode']:g} queries per episode",
            )
        )
    return f"{source('rollout', d)}\n\n{table(['figure', 'value'], rows)}"


def multi_query() -> str:
    d = load("multi_query")
    head = source(
        "multi_query",
        d,
        f" Replayed: {d['recordings']}, {d['rounds']} passes, modes alternating per episode; mini index, cache off",
    )
    rows = [
        (
            label,
            f"{r['episodes']:,}",
            f"{r['searches_per_episode']:.2f}",
            f"{r['queries_per_episode']:.2f}",
            f"{1000 * r['seconds_per_episode_mean']:.0f}",
            f"{1000 * r['seconds_per_episode_p50']:.0f}",
            f"{r['tokens_per_episode']:,.0f}",
        )
        for label, r in (("single query per search (stage 2)", d["single_query"]), ("`rag_r1`", d["rag_r1"]))
    ]
    rows.append(("rag_r1 / single", "", f"x{d['rounds_ratio']:.2f}", "", f"x{d['seconds_ratio']:.2f}", "", ""))
    body = table(
        ["mode", "episodes", "search rounds / episode", "queries / episode", "ms / episode", "p50 ms", "tokens"], rows
    )
    return f"{head}\n\n{body}"


def hostile() -> str:
    d = load("hostile")
    c, t = d["criteria"], d["server_timeouts"]
    inputs = d["inputs"]
    held = sum(r["holds"] for r in inputs)
    head = source(
        "hostile",
        d,
        f" An input holds with no 5xx, the event loop blocked under {c['max_loop_block_ms']:,.0f} ms and RSS "
        f"growth under {c['max_rss_growth_mb']:g} MB; header/body deadlines {t['header_timeout_s']} s / "
        f"{t['body_timeout_s']} s for the run. **{held} of {len(inputs)} inputs hold**; longest loop block "
        f"{max(r['max_loop_block_ms'] for r in inputs):,} ms, largest RSS growth "
        f"{max(r['rss_peak_growth_mb'] for r in inputs):.1f} MB",
    )
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in inputs:  # inputs answered alike, one row: the criteria are maxima
        answers = ", ".join(f"{k} x{v}" for k, v in r["statuses"].items())
        if not r["holds"]:
            answers += f" **(expected {r['expected']}: does not hold)**"
        groups.setdefault((r["server"], answers), []).append(r)
    rows = [
        (
            server,
            "; ".join(r["input"].replace("|", "\\|") for r in rs),
            answers,
            max(r["max_loop_block_ms"] for r in rs),
            num(max(r["rss_peak_growth_mb"] for r in rs)),
        )
        for (server, answers), rs in groups.items()
    ]
    body = table(["server", "inputs", "answers (each)", "longest loop block ms", "largest RSS growth MB"], rows)
    return f"{head}\n\n{body}"


def gmtrouter() -> str:
    d = load("gmtrouter")
    st = d["settings"]
    models = d["models"]
    head = source(
        "gmtrouter",
        d,
        f" synthetic users: {st['seen_users']} seen (trained on their first {st['train_fraction']:.0%} of sessions), "
        f"{st['new_users']} new ({st['new_user_context_sessions']} sessions of context); epochs "
        + ", ".join(f"{m} {st['epochs'][m]}" for m in models)
        + f"; mean of seeds {', '.join(str(s) for s in d['seeds'])}; training + evaluation seconds per seed "
        + ", ".join(f"{m} {num(d['seconds'][m], 0)}" for m in models)
        + "; margins: the worst seed's",
    )
    sets = {"seen_users_later_sessions": "seen users, later sessions", "new_users": "new users"}
    first = models[0]
    rows = []
    for key, label in sets.items():
        for metric in ("accuracy", "auc", "per_user_auc", "ndcg@3"):
            mean = {m: d["mean"][m][key] for m in models}
            worst = d["min_margin"][first][key]
            rows.append(
                (
                    f"{label}: {metric.replace('_', ' ')}",
                    *(num(mean[m]["personalised"][metric], 3) for m in models),
                    *(num(mean[m]["non_personalised"][metric], 3) for m in models),
                    num(mean[first]["popularity"][metric], 3),
                    f"+{num(worst['non_personalised'][metric], 3)} / +{num(worst['popularity'][metric], 3)}",
                )
            )
    body = table(
        [
            "held-out",
            *(f"{m} personalised" for m in models),
            *(f"{m} non-personalised" for m in models),
            "popularity",
            f"{first} worst margin (non-pers. / popularity)",
        ],
        rows,
    )
    return f"{head}\n\n{body}\n\n![GMTRouter against its baselines](../benchmarks/results/gmtrouter.png)"


def router_cost() -> str:
    d = load("router_cost")
    st = d["settings"]
    head = source(
        "router_cost",
        d,
        f" simulated routing, REINFORCE with a group baseline ({st['group']} samples, {st['questions_per_step']} "
        f"questions a step, {st['steps']} steps), mean of seeds {', '.join(str(s) for s in st['seeds'])}",
    )
    rows = [
        (
            "Router-R1 cost reward, c" if r["reward"] == "router_r1" else "cost penalty, w",
            num(r["weight"], 2),
            num(r["accuracy"], 3),
            num(r["cost_per_1k_questions"], 3),
            *(f"{100 * r[f'asks_{k}']:.0f} %" for k in ("easy", "medium", "hard")),
        )
        for r in d["rows"]
    ]
    header = ["reward", "weight", "accuracy", "$ / 1k questions", "asks (easy)", "asks (medium)", "asks (hard)"]
    return f"{head}\n\n{table(header, rows)}"


LEARNING_KEYS = ("score", "em", "reward", "searches_per_episode", "response_length")


COPY_KEYS = ("names_rate", "doc_city", "swapped_shown_city", "swapped_gold", "top_city_share")


def learning(name: str = "learning", targets: bool = True) -> str:
    """A learning run: every checkpoint's independent evaluation, per seed and as a mean, and the targets (not for
    a run of the stage-2 options, whose runs have no lr = 0 control)."""
    d = load(name)
    st = d["settings"]
    # Runs before the development split existed read the held-out questions alone.
    split = {"dev": "development", "heldout": "held-out"}[st.get("split", "heldout")]
    head = source(
        name,
        d,
        f" {len(d['seeds'])} seed(s); stage 1 {st['steps1']}"
        + (f" and stage 2 {st['steps2']}" if any("stage2" in s for s in d["seeds"]) else "")
        + f" rollout steps of 8 prompts x 8 samples, lr {st['lr']:g}"
        + (f", in {d['protocol']}'s tags" if d.get("protocol", "r1-searcher") != "r1-searcher" else "")
        + "; checkpoints sampled on "
        f"{d['seeds'][0]['stage1']['eval']['final']['episodes']} {split} episodes (temperature 1, top-p 0.95) and "
        f"decoded greedily once per {split} question",
    )
    rows = []
    for stage, metric, names in (
        ("stage1", "score", ("warm_start", "final", "control")),
        ("stage2", "em", ("start", "final", "control", "grpo", "dynamic", "process", "efficiency")),
    ):
        for name in names:
            per_seed = [s[stage]["eval"][name] for s in d["seeds"] if stage in s and name in s[stage]["eval"]]
            if not per_seed:
                continue
            means = {k: sum(e[k] for e in per_seed) / len(per_seed) for k in LEARNING_KEYS}
            greedy = [e["greedy"]["em"] for e in per_seed if "greedy" in e]
            probes = [e["copy"] for e in per_seed if "copy" in e]
            copy = {k: sum(c[k] or 0 for c in probes) / len(probes) if probes else None for k in COPY_KEYS}
            rows.append(
                (
                    f"{stage} {name.replace('_', ' ')}",
                    " / ".join(f"{e[metric]:.2f}" for e in per_seed),
                    f"{means['score']:.3f}",
                    f"{means['em']:.3f}",
                    f"{sum(greedy) / len(greedy):.3f}" if greedy else "-",
                    f"{means['reward']:.3f}",
                    f"{means['searches_per_episode']:.2f}",
                    f"{means['response_length']:.0f}",
                    *(("-" if copy[k] is None else f"{copy[k]:.2f}") for k in COPY_KEYS),
                )
            )
    body = table(
        ["checkpoint", "score per seed", "score", "EM", "greedy EM", "reward", "searches", "tokens",
         "names the person", "answers the documents' city", "swapped: their city", "swapped: the asked city",
         "top city share"],
        rows,
    )  # fmt: skip
    steps = d["summary"].get("stage2", {}).get("steps_to_em_0.5")
    if steps:
        body += "\n\nRollout steps to a training-batch EM of 0.5 (per seed; `-`: not within the run): " + "; ".join(
            f"{ {'train': 'REINFORCE++', 'grpo': 'GRPO', 'dynamic': 'dynamic filtering'}.get(run, run) }: "
            + " / ".join("-" if v is None else str(v) for v in per.values())
            for run, per in steps.items()
        )
    if not targets:
        return f"{head}\n\n{body}"
    results = [(stage, k.replace("_", " "), v) for stage, t in d["summary"].items() for k, v in t["targets"].items()]
    missed = [f"{stage}: {k}" for stage, k, v in results if not v]
    targets = f"{len(results) - len(missed)} of {len(results)} met" + (
        f"; **not met**: {'; '.join(missed)}" if missed else ""
    )
    return f"{head}\n\n{body}\n\nTargets (`benchmarks/learning.py`): {targets}."


ASYNC_ROLLOUT = ("async_rollout", "async_rollout_repeat", "async_rollout_repeat2")


def async_rollout() -> str:
    """Sync against async-partial on CPU, round by round, from the three recorded sessions."""
    rows = []
    for name in ASYNC_ROLLOUT:
        d = load(name)
        runs = {(r["latency_s"], r["round"], r["schedule"]): r for r in d["runs"]}
        ratio = {r["latency_s"]: r for r in d["ratios"]}
        for lat, rnd in dict.fromkeys((r["latency_s"], r["round"]) for r in d["runs"]):
            sync, other = runs[(lat, rnd, "sync")], runs[(lat, rnd, "async-partial")]
            rows.append(
                (
                    name.removeprefix("async_rollout").lstrip("_") or "first",
                    num(lat),
                    rnd,
                    f"{sync['samples_per_hour']:,.0f}",
                    f"{other['samples_per_hour']:,.0f}",
                    num(other["samples_per_hour"] / sync["samples_per_hour"], 2),
                    num(sync["overlap_bound"], 2),
                    f"{num(sync['trainer_busy_share'], 2)} / {num(other['trainer_busy_share'], 2)}",
                    f"{num(sync['heldout_score'], 2)} / {num(other['heldout_score'], 2)}",
                    f"{other['vllm_kl']:.3f} / {other['is_filter_ratio']:.3f}",
                )
            )
        rows += [
            (
                name.removeprefix("async_rollout").lstrip("_") or "first",
                num(lat),
                "all",
                "",
                "",
                f"**{num(r['samples_per_hour_ratio'], 2)}**",
                "",
                "",
                "",
                "",
            )
            for lat, r in ratio.items()
            if sum(1 for k in runs if k[0] == lat and k[2] == "sync") > 1
        ]
    first = load(ASYNC_ROLLOUT[0])
    files = ", ".join(f"`{n}.json`" for n in ASYNC_ROLLOUT)
    head = (
        f"*{files} (three sessions), "
        f"{first.get('date') or 'undated (the JSON records no date)'}, {machine(first['machine'])}. "
        f"Stage 1's rehearsal, {first['steps']} steps a run, lr {first['lr']:g}; *all*: the file's rounds together*"
    )
    header = ["session", "search latency s", "round", "sync samples/h", "async-partial samples/h", "async / sync",
              "sync overlap_bound", "trainer busy, sync / async", "held-out score, sync / async",
              "async vllm_kl / is_filter_ratio"]  # fmt: skip
    return f"{head}\n\n{table(header, rows)}"


def async_projection() -> str:
    d = load("async_projection")
    decodes = list(dict.fromkeys(r["decode"] for r in d["rows"]))
    latencies = list(dict.fromkeys(r["latency_s"] for r in d["rows"]))
    at = {(r["decode"], r["latency_s"]): r for r in d["rows"]}
    steady = {k: {r[k] for r in d["rows"]} for k in ("training_8_s", "async_4_4_step_s")}
    same = all(len(v) == 1 for v in steady.values())
    rows = []
    for lat in latencies:
        some = at[(decodes[0], lat)]
        rows.append(
            (num(lat),)
            + (() if same else (num(some["training_8_s"]), num(some["async_4_4_step_s"])))
            + tuple(
                f"{num(r['critical_path_s'])} / {num(r['sync_step_s'])} ({r['async_over_sync']:.2f}x)"
                for r in (at[(dec, lat)] for dec in decodes)
            )
        )
    body = table(
        ["search s"]
        + ([] if same else ["training, 8 GPUs (s)", "async 4+4 step (s)"])
        + [f"{dec}: critical path / sync step s (async / sync)" for dec in decodes],
        rows,
    )
    if same:
        body = (
            f"Training on 8 GPUs {num(next(iter(steady['training_8_s'])))} s and the async 4+4 step "
            f"{num(next(iter(steady['async_4_4_step_s'])))} s at every latency.\n\n{body}"
        )
    gen = [r for r in d["rows"] if abs(r["generation_8_s"] - r["critical_path_s"]) > 0.05]
    if gen:
        body += "\n\nGeneration on 8 GPUs where it differs from the critical path: " + "; ".join(
            f"{r['decode']} at {num(r['latency_s'])} s: {num(r['generation_8_s'])} s" for r in gen
        )
    rates, shape = d["rates"], d["episode_shape"]
    g = d["gpu"]["machine"]
    graphs_s = rates.get("decode_step_s_graphs")
    graphed = f", {graphs_s * 1000:.1f} ms with CUDA graphs" if graphs_s is not None else ""
    crossing = "; ".join(f"{k}: {v if v is not None else 'never'} s" for k, v in d["crossover_latency_s"].items())
    notes = (
        f"Measured on one {g['device_name']} ({g['torch']}): forward+backward {rates['train_tokens_per_s']:,.0f} "
        f"tokens/s, no-grad forward {rates['logprob_tokens_per_s']:,.0f}, "
        f"prefill {rates['prefill_tokens_per_s']:,.0f}, "
        f"decode {rates['decode_step_s_measured'] * 1000:.1f} ms a step at batch {rates['decode_batch']} eager"
        f"{graphed} (bandwidth bound {rates['decode_step_s_bound'] * 1000:.1f} ms). "
        f"Episode: {shape['searches_mean']} searches (at most "
        f"{shape['searches_max']:.0f}), {shape['policy_tokens_mean']:.0f} policy tokens (at most "
        f"{shape['policy_tokens_max']:.0f}), {shape['document_tokens_mean']:.0f} document tokens, "
        f"{d['episodes_per_step']:,} episodes a step; a chain of {d['critical_chain']['used']:.0f} searches on the "
        f"critical path (the CPU run measured {d['critical_chain']['measured_cpu']}); weight sync {d['sync_s']} s "
        f"assumed. Async overtakes sync from a search latency of {crossing}."
    )
    head = source("async_projection", d, " A model on paper, from the measured figures below.")
    return f"{head}\n\n{body}\n\n{notes}"


TABLES: dict[str, Callable[[], str]] = {
    "encode": encode,
    "scale": scale,
    "scale-projection": scale_projection,
    "scale-kiltmini": scale_kiltmini,
    "hybrid": hybrid,
    "retrieval": retrieval,
    "retrieval-projection": retrieval_projection,
    "retrieval-server": retrieval_server,
    "retrieval-encoder": retrieval_encoder,
    "encoder-backends": encoder_backends,
    "import-index": import_shrink,
    "index-recall": index_recall,
    "index-recall-100k": index_recall_100k,
    "threads": threads,
    "reward-server": reward_server,
    "load": load_table,
    "restart": restart,
    "serve": serve,
    "reward-keys": reward_keys,
    "rollout": rollout,
    "multi-query": multi_query,
    "hostile": hostile,
    "gmtrouter": gmtrouter,
    "router-cost": router_cost,
    "learning": learning,
    "learning-search-r1": partial(learning, "learning_search_r1"),
    "async-rollout": async_rollout,
    "async-projection": async_projection,
}


def render(page: str) -> str:
    """The page with every marked table re-rendered from the JSON; an unknown table name is an error."""

    def one(m: re.Match) -> str:
        name = m.group(2)
        if name not in TABLES:
            raise KeyError(f"{PAGE.name}: <!-- table:{name} -->: no such table; known: {', '.join(TABLES)}")
        return f"{m.group(1)}{TABLES[name]()}\n{m.group(4)}"

    return BLOCK.sub(one, page)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tables", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the page differs from what the JSON renders")
    p.add_argument("--page", type=Path, default=PAGE, help="the Markdown page (default docs/BENCHMARKS.md)")
    args = p.parse_args(argv)
    text = args.page.read_text(encoding="utf-8")
    new = render(text)
    if args.check:
        if new != text:
            print(
                f"{args.page}: tables differ from benchmarks/results; run python -m benchmarks.tables", file=sys.stderr
            )
            return 1
        return 0
    args.page.write_text(new, encoding="utf-8")
    print(f"{args.page}: {len(BLOCK.findall(new))} tables rendered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
