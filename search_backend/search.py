"""One-shot search over a local index: one JSON line per query (`query`, `results`, best first)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from searchrl.search.settings import INDEX_BACKENDS


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="searchrl search query", description=__doc__)
    p.add_argument("--index", required=True, help="index directory made by searchrl.search.index.build")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--query", help="one query")
    source.add_argument("--queries", type=Path, help="text file, one query per line")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--json", action="store_true", help="JSON lines (default: readable text)")
    p.add_argument(
        "--backend",
        default="local",
        choices=INDEX_BACKENDS,
        help="local: dense search with the index's type; bm25 (index built with --bm25); hybrid: both",
    )
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    measured = "(default: what the index measured when it was made)"
    p.add_argument("--rerank-depth", type=int, help=f"compact index type: candidates re-scored {measured}")
    p.add_argument("--nprobe", type=int, help=f"IVF lists probed per query {measured}")
    p.add_argument("--ef-search", type=int, help=f"HNSW search breadth {measured}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # The factory imports every backend, FAISS with them: `--help` and a mistyped flag answer without that load.
    from searchrl.search.backends import SearchConfig, open_backend

    if args.query is not None:
        queries = [args.query]
    else:
        queries = [line.strip() for line in args.queries.read_text(encoding="utf-8").splitlines() if line.strip()]
    config = SearchConfig(
        backend=args.backend,
        index_dir=args.index,
        device=args.device,
        nprobe=args.nprobe,
        ef_search=args.ef_search,
        rerank_depth=args.rerank_depth,
    )
    backend = open_backend(config)
    for query, hits in zip(queries, backend.search_sync(queries, args.top_k), strict=True):
        if args.json:
            print(json.dumps({"query": query, "results": [p.to_dict() for p in hits]}, ensure_ascii=False))
        else:
            print(f"# {query}")
            for rank, p in enumerate(hits, start=1):
                print(f"{rank}. [{p.score:.4f}] {p.id} {p.title}: {p.text[:160]}")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
