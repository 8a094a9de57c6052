"""Build a search index directory from a corpus: passage store, fp16 embedding shards, FAISS index, manifest.

Every step leaves finished files under their final names only (temp name, then os.replace), so a re-run after
a crash keeps the store and every finished shard, and produces the same index as an uninterrupted run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from tqdm import tqdm

from search_backend.corpus import FORMATS, CorpusReport, Record, file_sha256, read_corpus
from search_backend.profiles import DEFAULT_MODEL, PRODUCTION_MODEL, PROFILES, profile_for

log = logging.getLogger("search_backend.build_index")

MANIFEST = "manifest.json"
INDEX_FILE = "index.faiss"
STORE_DIR = "store"
STORE_INFO = "store.json"
EMBED_DIR = "embeddings"
EMBED_INFO = "embeddings.json"
MANIFEST_VERSION = 1


def write_json_atomic(path: Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def shard_path(out: Path, shard: int) -> Path:
    return out / EMBED_DIR / f"shard_{shard:05d}.npy"


def build_store(corpus: Path, fmt: str, out: Path, checksum: str, max_bad_lines: int | None,
                max_bad_fraction: float | None) -> dict:
    from search_backend.store import write_store

    info = {"corpus_sha256": checksum, "format": fmt}
    done = read_json(out / STORE_INFO)
    if done and all(done.get(k) == v for k, v in info.items()) and (out / STORE_DIR).is_dir():
        log.info("passage store already built (%d passages), reusing it", done["passages"])
        return done
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
    info.update(passages=count, lines=report.lines, bad_lines=report.bad,
                bad_examples=[{"line": n, "reason": r} for n, r in report.examples])
    write_json_atomic(out / STORE_INFO, info)
    return info


def encode_shards(out: Path, model: str, profile_name: str, device: str, batch_size: int, shard_size: int,
                  max_seq_length: int | None) -> tuple[list[Path], int]:
    from search_backend.encoder import Encoder, passage_text
    from search_backend.store import PassageStore

    store = PassageStore(out / STORE_DIR)
    n = len(store)
    n_shards = max(1, math.ceil(n / shard_size))
    shards = [shard_path(out, i) for i in range(n_shards)]
    (out / EMBED_DIR).mkdir(parents=True, exist_ok=True)
    info = {"model": model, "profile": profile_name, "shard_size": shard_size, "passages": n,
            "max_seq_length": max_seq_length}
    previous = read_json(out / EMBED_INFO)
    if previous is not None and {k: previous.get(k) for k in info} != info:
        raise SystemExit(f"{out / EMBED_DIR} holds shards made with {previous}, not {info}; use another --out "
                         f"or delete {out / EMBED_DIR}")
    todo = [i for i, p in enumerate(shards) if not p.exists()]
    encoder = Encoder(model, device=device, profile=PROFILES[profile_name], max_seq_length=max_seq_length)
    if previous is None:
        write_json_atomic(out / EMBED_INFO, {**info, "dimension": encoder.dimension})
    if len(todo) < n_shards:
        log.info("%d of %d embedding shards already finished, skipping them", n_shards - len(todo), n_shards)
    bar = tqdm(total=sum(min(shard_size, n - i * shard_size) for i in todo), desc="encode", unit=" passages",
               dynamic_ncols=True)
    for shard in todo:
        start, end = shard * shard_size, min(n, (shard + 1) * shard_size)
        parts = []
        for lo in range(start, end, batch_size):
            hi = min(end, lo + batch_size)
            texts = [passage_text(store.title(r), store.text(r)) for r in range(lo, hi)]
            parts.append(encoder.encode_passages(texts, batch_size=batch_size))
            bar.update(hi - lo)
        vectors = np.concatenate(parts).astype(np.float16) if parts else np.zeros((0, encoder.dimension), np.float16)
        tmp = shards[shard].with_name(shards[shard].name + ".tmp")
        with open(tmp, "wb") as handle:
            np.save(handle, vectors)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, shards[shard])
    bar.close()
    return shards, encoder.dimension


def build(corpus: str | Path, fmt: str, out: str | Path, model: str = DEFAULT_MODEL, profile: str | None = None,
          factory: str = "Flat", device: str = "cpu", batch_size: int = 64, shard_size: int = 100_000,
          max_bad_lines: int | None = 0, max_bad_fraction: float | None = None, train_size: int = 1_000_000,
          max_seq_length: int | None = None) -> dict:
    """Build (or finish building) an index directory; returns the manifest."""
    from search_backend.faiss_index import build_index, effective_factory, gpu_count, write_index_atomic

    corpus, out = Path(corpus), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    profile_name = profile or profile_for(model).name
    checksum = file_sha256(corpus)
    store_info = build_store(corpus, fmt, out, checksum, max_bad_lines, max_bad_fraction)
    started = time.perf_counter()
    shards, dimension = encode_shards(out, model, profile_name, device, batch_size, shard_size, max_seq_length)
    encode_s = time.perf_counter() - started
    n = store_info["passages"]
    factory_used = effective_factory(factory, n)
    if factory_used != factory:
        log.warning("factory %s clamped to %s for %d passages", factory, factory_used, n)
    started = time.perf_counter()
    index = build_index(shards, dimension, factory_used, device=device, train_size=train_size)
    index_s = time.perf_counter() - started
    write_index_atomic(index, out / INDEX_FILE)
    manifest = {
        "version": MANIFEST_VERSION,
        "model": model,
        "profile": PROFILES[profile_name].to_dict(),
        "dimension": dimension,
        "normalize": PROFILES[profile_name].normalize,
        "metric": "inner_product",
        "factory_requested": factory,
        "factory": factory_used,
        "passages": n,
        "corpus": {"path": str(corpus), "sha256": checksum, "format": fmt, "lines": store_info["lines"],
                   "bad_lines": store_info["bad_lines"]},
        "files": {"index": INDEX_FILE, "index_bytes": (out / INDEX_FILE).stat().st_size, "store": STORE_DIR,
                  "embeddings": EMBED_DIR, "shard_size": shard_size, "embedding_dtype": "float16"},
        "build": {"device": device, "gpus": gpu_count() if device == "cuda" else 0, "batch_size": batch_size,
                  "encode_seconds": round(encode_s, 3), "index_seconds": round(index_s, 3),
                  "max_seq_length": max_seq_length},
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    # The manifest goes last: a directory without one is an unfinished build, never a usable index.
    write_json_atomic(out / MANIFEST, manifest)
    return manifest


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m search_backend.build_index", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True, help="corpus file")
    p.add_argument("--format", required=True, choices=FORMATS,
                   help="kilt: KILT knowledge-source JSONL, split into 100-word passages; "
                        "tsv: id<TAB>text[<TAB>title]; jsonl: {id, title, text}")
    p.add_argument("--out", required=True, help="index directory to create or resume")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"sentence-transformers name or path (default: bundled {DEFAULT_MODEL}; "
                        f"production: {PRODUCTION_MODEL})")
    p.add_argument("--profile", choices=sorted(PROFILES), help="model profile (default: guessed from --model)")
    p.add_argument("--factory", default="Flat",
                   help="FAISS index factory, e.g. Flat, HNSW32, IVF4096,SQ8, IVF4096,PQ64 (IVF nlist is clamped "
                        "to passages/39)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--shard-size", type=int, default=100_000, help="passages per embedding shard")
    p.add_argument("--max-seq-length", type=int, default=None, help="truncate passages to this many tokens")
    p.add_argument("--train-size", type=int, default=1_000_000, help="vectors sampled to train IVF/PQ/SQ")
    p.add_argument("--max-bad-lines", type=int, default=0,
                   help="fail when more corpus lines than this are malformed (-1: no limit)")
    p.add_argument("--max-bad-fraction", type=float, default=None,
                   help="fail when more than this fraction of corpus lines are malformed")
    return p


def main(argv: list[str] | None = None) -> int:
    from search_backend.corpus import TooManyBadLines

    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        manifest = build(args.corpus, args.format, args.out, model=args.model, profile=args.profile,
                         factory=args.factory, device=args.device, batch_size=args.batch_size,
                         shard_size=args.shard_size,
                         max_bad_lines=None if args.max_bad_lines < 0 else args.max_bad_lines,
                         max_bad_fraction=args.max_bad_fraction, train_size=args.train_size,
                         max_seq_length=args.max_seq_length)
    except TooManyBadLines as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"out": str(args.out), "passages": manifest["passages"], "factory": manifest["factory"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
