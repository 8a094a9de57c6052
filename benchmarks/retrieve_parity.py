"""The `retrieve` backend against Search-R1's own `retrieval_server.py`, run unchanged over this project's index by
`benchmarks.peers`, beside this project's server over the same index:

    python -m benchmarks.peers search-r1 --file CLONE/search_r1/search/retrieval_server.py --index DIR --port 8321 &
    searchrl search serve --index DIR --port 8322 &
    python -m benchmarks.retrieve_parity --peer http://127.0.0.1:8321 --ours http://127.0.0.1:8322

For each of the bundled kiltmini queries: the passages `search.backend: retrieve` gets from Search-R1's server and
those `search.backend: http` gets from ours, compared by id and by the documents block the search-r1 protocol renders
from them; then one GRPO turn of Search-R1's recipe (512 prompts x 5 samples = 2,560 queries) in one call to its
server.
Writes benchmarks/results/retrieve_parity.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from searchrl.paths import ROOT
from searchrl.protocols import search_r1
from searchrl.search.http_client import HttpSearchBackend
from searchrl.search.retrieve import RetrieveBackend

QUERIES = ROOT / "tests/fixtures/search/kiltmini_queries.jsonl"
TURN = 512 * 5


async def measure(peer: str, ours: str, top_k: int) -> dict:
    queries = [json.loads(line)["query"] for line in QUERIES.read_text(encoding="utf-8").splitlines() if line.strip()]
    async with RetrieveBackend(peer, timeout_s=900) as theirs, HttpSearchBackend(ours, timeout_s=900) as own:
        through_retrieve = await theirs.search(queries, top_k)
        through_search = await own.search(queries, top_k)
        same_ids = sum(
            [p.id for p in a] == [p.id for p in b] for a, b in zip(through_retrieve, through_search, strict=True)
        )
        same_block = sum(
            search_r1.render_documents(a) == search_r1.render_documents(b)
            for a, b in zip(through_retrieve, through_search, strict=True)
        )
        turn = [queries[i % len(queries)] for i in range(TURN)]
        started = time.perf_counter()
        answered = await theirs.search(turn, top_k)
        seconds = time.perf_counter() - started
    return {
        "queries": len(queries),
        "top_k": top_k,
        "same_ids": same_ids,
        "same_documents_block": same_block,
        "grpo_turn": {
            "queries": TURN,
            "answered": sum(len(hits) == top_k for hits in answered),
            "seconds": round(seconds, 1),
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peer", required=True, help="Search-R1's retrieval_server.py, started by benchmarks.peers")
    p.add_argument("--ours", required=True, help="this project's retrieval server over the same index")
    p.add_argument("--top-k", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/retrieve_parity.json")
    p.add_argument("--machine", default="2-core CPU, no GPU")
    args = p.parse_args(argv)
    figures = asyncio.run(measure(args.peer, args.ours, args.top_k))
    figures = {"date": time.strftime("%Y-%m-%d"), "machine": args.machine, **figures}
    args.out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
