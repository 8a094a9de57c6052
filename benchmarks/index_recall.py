"""What an approximate index keeps of the exact top-10, as it measured itself when it was made and on held-out
questions it never saw, against the fixed settings every index served before (nprobe 64, efSearch 128, 100
re-scored).

The corpus is small and mixed, as the issue that asked for this found it: 800 passages (the KILT fixture, the mini
corpus, fictional people; each cut to 60 words), with the bundled MiniLM. Cases: a compact import in Search-R1's
layout from an e5-style Flat file (mean pooling, `passage: ` prefix), and `searchrl index build` with HNSW32 and
IVF20,SQ8. Held-out questions: HotpotQA, 2Wiki and Musique's evaluation questions (1,500), scored against an exact
search of the same vectors. Prints a table and writes JSON.

    python -m benchmarks.index_recall [--passages 800] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.tables import save
from searchrl.paths import ROOT

SOURCES = (
    "tests/fixtures/search/kiltmini_passages.jsonl",
    "examples/mini_corpus.jsonl",
    "examples/fictional/corpus.jsonl",
)
QUESTIONS = ("eval/data/hotpotqa_500.jsonl", "eval/data/2wiki_500.jsonl", "eval/data/musique_500.jsonl")
BEFORE = {"nprobe": 64, "ef_search": 128, "rerank_depth": 100}


def passages(n: int, words: int = 60) -> list[dict]:
    rows: list[dict] = []
    for source in SOURCES:
        rows += [json.loads(line) for line in (ROOT / source).open(encoding="utf-8")]
    return [{**r, "text": " ".join(r["text"].split()[:words])} for r in rows[:n]]


def kept(got: list[list[str]], want: list[list[str]]) -> float:
    return round(float(np.mean([len(set(g) & set(w)) / len(w) for g, w in zip(got, want, strict=True)])), 4)


def case(name: str, out: Path, manifest: dict, seconds: float, questions: list[str], exact: list[list[str]]) -> dict:
    from searchrl.search.local_faiss import LocalFaissBackend

    tuned = LocalFaissBackend(out, encoder_backend="torch")
    before = LocalFaissBackend(out, encoder_backend="torch", **BEFORE)
    found = manifest["recall"]
    row = {
        "case": name,
        "index_type": manifest["index_type"],
        "factory": manifest["factory"],
        "measured_recall": found.get("recall"),
        "outcome": found.get("outcome"),
        "search_params": manifest["search_params"],
        "settings_tried": len(found.get("tried", [])),
        "made_seconds": round(seconds, 1),
        "held_out_kept": kept([[p.id for p in hits] for hits in tuned.search_sync(questions, 10)], exact),
        "held_out_kept_before": kept([[p.id for p in hits] for hits in before.search_sync(questions, 10)], exact),
    }
    print(
        f"{name:<28} measured {row['measured_recall']}  held-out {row['held_out_kept']}  (before: "
        f"{row['held_out_kept_before']})  {row['search_params']}  {row['made_seconds']} s",
        flush=True,
    )
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passages", type=int, default=800)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/index_recall.json")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from searchrl.search.encode.encoder import Encoder
    from searchrl.search.encode.profiles import PROFILES, bundled_model_path
    from searchrl.search.index.build import build
    from searchrl.search.index.faiss_import import faiss
    from searchrl.search.index.importer import import_index

    model = str(bundled_model_path())
    rows = passages(args.passages)
    questions = [json.loads(line)["question"] for q in QUESTIONS for line in (ROOT / q).open(encoding="utf-8")]
    results = []
    with tempfile.TemporaryDirectory(prefix="searchrl-index-recall-") as tmp:
        work = Path(tmp)
        # Search-R1's layout: `"title"\ntext` contents, e5's prefixes and mean pooling, a Flat file of its vectors.
        e5 = Encoder(model, profile=PROFILES["e5"], max_seq_length=180, backend="torch")
        layout = [{"id": str(i), "contents": f'"{r["title"]}"\n{r["text"]}'} for i, r in enumerate(rows)]
        corpus = work / "wiki-18.jsonl"
        corpus.write_text("".join(json.dumps(r) + "\n" for r in layout), encoding="utf-8")
        flat = faiss.IndexFlatIP(e5.dimension)
        flat.add(e5.encode_passages([r["contents"] for r in layout]))
        faiss.write_index(flat, str(work / "e5_Flat.index"))
        _, truth = flat.search(e5.encode_queries(questions), 10)
        exact = [[str(r) for r in line] for line in truth]
        started = time.perf_counter()
        manifest = import_index("search-r1", corpus, work / "e5_Flat.index", model, work / "compact", profile="e5",
                                index_type="compact")  # fmt: skip
        results.append(case("compact import (Search-R1)", work / "compact", manifest, time.perf_counter() - started,
                            questions, exact))  # fmt: skip
        plain = work / "corpus.jsonl"
        plain.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        default = Encoder(model, backend="torch")
        built_flat = faiss.IndexFlatIP(default.dimension)
        for factory in ("HNSW32", "IVF20,SQ8"):
            started = time.perf_counter()
            manifest = build(plain, "jsonl", work / factory, factory=factory)
            if built_flat.ntotal == 0:
                shards = sorted((work / factory / "embeddings").glob("shard_*.npy"))
                built_flat.add(np.concatenate([np.load(s).astype(np.float32) for s in shards]))
                _, truth = built_flat.search(default.encode_queries(questions), 10)
                built_exact = [[r["id"] for r in (rows[i] for i in line)] for line in truth]
            results.append(case(f"build {factory}", work / factory, manifest, time.perf_counter() - started,
                                questions, built_exact))  # fmt: skip
    out = {
        "benchmark": "index_recall",
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"faiss {faiss.__version__}",
        "passages": len(rows),
        "questions": len(questions),
        "before": BEFORE,
        "cases": results,
        "target": "held-out questions keep >= 0.99 of the exact top-10 at the measured settings",
        "target_met": all(r["held_out_kept"] >= 0.99 for r in results),
    }
    save(out, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
