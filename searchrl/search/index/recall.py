"""An approximate index measures, when it is made, how much of the exact top-10 it keeps, and takes the cheapest
search setting that keeps at least 0.99 of it.

The queries are real questions when the build is given them (`--queries FILE`), else generated from a sample of the
corpus's own rows and named as such: each row's title and 8 words from the middle of its text, not the start a
passage's own vector sits closest to, held to a stricter target (GENERATED_TARGET) since they are easier. A row's
own vector as the query (tried first) chose settings that kept 0.995 of its top-10 but 0.985 of real questions' (800
passages, IVF20,PQ48x4): passages sit closer to their neighbours than questions do. The exact top-10 comes from the
fp16 shards, the approximate one from the index at each setting FAISS's ParameterSpace lists for it (nprobe for IVF,
efSearch for HNSW; the whole range up to every list), and, for the compact type, at each re-scoring depth: its
re-scoring restores the exact order among its candidates, so what it keeps is the exact top-10's share of the
candidates. Recall only grows with each of these, so the first setting that reaches the target, cheapest first, is
taken; the cost of a setting is the bytes it reads per query, which, unlike a timing, is the same on every run.

No setting goes below the fixed ones every index served before (nprobe 64, efSearch 128, 100 re-scored): made
from the corpus, the queries are easier than questions are. On 800 passages, HNSW32 tuned to efSearch 16 kept
0.991 of their top-10 but 0.974 of 1,500 held-out questions' (0.997 at 128); IVF20,SQ8 at nprobe 16, 0.988 of
the questions' (benchmarks/index_recall.py). Tuning raises a setting where it must and never lowers one.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from searchrl.search.index.faiss_import import faiss
from searchrl.search.index.index_types import kind_of
from searchrl.search.index.shards import EmbeddingShards
from searchrl.search.index.torch_exact import ShardedExactIndex
from searchrl.search.index_settings import DEFAULT_EF_SEARCH, DEFAULT_NPROBE, DEFAULT_RERANK_DEPTH

log = logging.getLogger(__name__)

TARGET = 0.99
# Generated queries sit nearer their passages than questions do, so they must keep more: on 800 passages (a compact
# import, IVF20) the setting that kept 0.99 of theirs kept 0.9875 of 200 held-out questions' top-10; the one keeping
# 0.995 kept 0.9995. Real questions (`--queries`) are held to TARGET.
GENERATED_TARGET = 0.995
K = 10
QUERY_SAMPLE = 1000
RERANK_DEPTHS = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
EF_SEARCH_MORE = (1024, 2048, 4096)
FLOORS = {"nprobe": DEFAULT_NPROBE, "efSearch": DEFAULT_EF_SEARCH}
QUERY_WORDS = 8
ROW_QUERIES = (
    f"generated, not real questions: {QUERY_SAMPLE} sampled rows' titles, each with {QUERY_WORDS} words from the "
    "middle of its text (not its start)"
)


@dataclass
class Tuning:
    """What a measurement found; `params` are the search settings the server applies (`search_params`)."""

    target: float
    recall: float
    params: dict[str, int]
    reached: bool
    queries: int
    query_source: str
    tried: list[dict[str, Any]] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        return {**asdict(self), "recall": round(self.recall, 4)}


def approximate(index_type: str, factory: str | None) -> bool:
    """Whether the index can miss part of the exact top-10 (`IndexType.approximate`)."""
    return kind_of(index_type).approximate(factory)


def compact_bytes(n: int, dimension: int, code_bytes: float, nlist: int, bits: int) -> float:
    """RAM a compact index holds: codes and ids per vector, the coarse centroids and the PQ codebooks."""
    return n * (code_bytes + 8) + nlist * dimension * 4 + (2**bits) * dimension * 4


def exact_bytes(n: int, dimension: int) -> int:
    """What the exact type reads: the fp16 shards (memory-mapped; no index of its own)."""
    return n * dimension * 2


def sample_rows(n: int, count: int = QUERY_SAMPLE) -> np.ndarray:
    """Evenly spaced rows, offset by half a step from the training sample's (which starts at row 0)."""
    count = min(count, n)
    step = n / count
    return np.unique((np.arange(count) * step + step / 2).astype(np.int64).clip(0, n - 1))


def row_query(title: str, text: str) -> str:
    """A query made from a passage: its title, as a short question names its subject, and words from the middle of
    its text, so the query is not the passage's own start (a text too short for that gives what it has)."""
    words = text.split()
    start = max(0, min(len(words) // 2 - QUERY_WORDS // 2, len(words) - QUERY_WORDS))
    return " ".join([title, *words[start : start + QUERY_WORDS]]).strip()


def positions(found: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Where each exact row stands in its line of `found` (the line's length when absent); -1 exact rows (a line
    shorter than k) count as found at 0."""
    eq = found[:, :, None] == exact[:, None, :]
    pos = np.where(eq.any(axis=1), eq.argmax(axis=1), found.shape[1])
    return np.where(exact < 0, 0, pos)


def kept_within(pos: np.ndarray, depth: int) -> float:
    """Mean share of the exact rows found among each line's first `depth`."""
    return float((pos < depth).mean()) if pos.size else 1.0


def ranges(index: faiss.Index) -> dict[str, list[int]]:
    """FAISS's own parameter ranges for the index (ParameterSpace), with nprobe up to every list and efSearch
    past FAISS's last value, so a small or hard corpus can still reach the target."""
    space = faiss.ParameterSpace()
    space.initialize(index)
    found: dict[str, list[int]] = {}
    for i in range(space.parameter_ranges.size()):
        pr = space.parameter_ranges.at(i)
        if pr.name in ("nprobe", "efSearch"):
            found[pr.name] = sorted({int(pr.values.at(j)) for j in range(pr.values.size()) if pr.values.at(j) >= 1})
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        nlist = int(ivf.nlist)
        found["nprobe"] = sorted({*(v for v in found.get("nprobe", []) if v <= nlist), nlist})
    if "efSearch" in found:  # below k, HNSW searches with k anyway
        found["efSearch"] = sorted({K, *(v for v in found["efSearch"] if v > K), *EF_SEARCH_MORE})
    return found


def measure(
    index: faiss.Index,
    shards: EmbeddingShards,
    compact: bool,
    queries: np.ndarray,
    query_source: str,
    target: float = TARGET,
    k: int = K,
) -> Tuning:
    """The cheapest setting keeping `target` of the exact top-k for `queries`, or, when none does, the most
    accurate one (`reached` False)."""
    n = int(index.ntotal)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    log.info("measuring the top-%d kept on %d queries (%s)", k, len(queries), query_source)
    _, exact = ShardedExactIndex(shards, ["cpu"]).search(queries, k)
    found = ranges(index)
    space = faiss.ParameterSpace()
    tried: list[dict[str, Any]] = []
    code_bytes = _code_bytes(index)
    ivf = faiss.try_extract_index_ivf(index)
    scanned = (n / int(ivf.nlist)) if ivf is not None else float(n)

    def cost(params: dict[str, int]) -> float:
        probed = params.get("nprobe", 1) * scanned if ivf is not None else n
        return probed * code_bytes + params.get("rerank_depth", 0) * shards.dimension * 2

    name = "nprobe" if "nprobe" in found else "efSearch" if "efSearch" in found else None
    values: Sequence[int | None] = floored(found[name], FLOORS[name]) if name else [None]
    depths = [d for d in RERANK_DEPTHS if k <= d < n] + ([n] if n <= max(RERANK_DEPTHS) else []) if compact else [k]
    depths = floored(depths, DEFAULT_RERANK_DEPTH)
    cheapest = float("inf")
    for value in values:
        params: dict[str, int] = {} if name is None or value is None else {name: value}
        if cost({**params, "rerank_depth": 0}) >= cheapest:
            break  # every later value scans more than the cheapest setting found costs in all
        if name is not None:
            space.set_index_parameter(index, name, value)
        _, rows = index.search(queries, min(n, max(depths)))
        pos = positions(rows, exact)
        for depth in depths:
            setting = {**params, "rerank_depth": depth} if compact else params
            recall = kept_within(pos, depth)
            tried.append({**setting, "recall": round(recall, 4), "bytes_per_query": cost(setting)})
            if recall >= target:
                cheapest = min(cheapest, cost(setting))
                break  # a deeper re-scoring at this value only costs more
    best = max(tried, key=lambda t: (t["recall"], -t["bytes_per_query"]))
    reaching = [t for t in tried if t["recall"] >= target]
    chosen = min(reaching, key=lambda t: t["bytes_per_query"]) if reaching else best
    params = {p: int(v) for p, v in chosen.items() if p not in ("recall", "bytes_per_query")}
    if name is not None:
        space.set_index_parameter(index, name, params[name])
    return Tuning(target, chosen["recall"], params, bool(reaching), len(queries), query_source, tried)


def floored(values: Sequence[int], floor: int) -> list[int]:
    """The values at or above the floor, the largest value standing for it when all are below (nprobe 64 of 20
    lists is every list)."""
    kept = [v for v in values if v >= floor]
    return kept or [max(values)]


def _code_bytes(index: faiss.Index) -> float:
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        return float(ivf.code_size)
    code = getattr(faiss.downcast_index(index), "code_size", None)
    return float(code) if code else float(index.d * 4)


_COMPACT = re.compile(r"IVF(\d+),PQ(\d+)(?:x(\d+))?")


def compact_is_exact(n: int, dimension: int, factory: str) -> bool:
    """Whether, at n passages, the exact type costs no more memory than the compact factory would hold: then
    compact means exact (its fp16 shards are on disk either way)."""
    match = _COMPACT.fullmatch(factory)
    if match is None:
        return False
    nlist, m, bits = int(match.group(1)), int(match.group(2)), int(match.group(3) or 8)
    return exact_bytes(n, dimension) <= compact_bytes(n, dimension, m * bits / 8, nlist, bits)


def read_queries(path: Path) -> list[str]:
    """One query a line; a JSON line gives its `query` or `question` field (the eval sets' JSONL)."""
    if not path.is_file():
        raise ValueError(f"--queries {path}: no such file")
    queries = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = line.strip()
        if text.startswith("{"):
            record = json.loads(text)
            text = str(record.get("query") or record.get("question") or "").strip()
            if not text:
                raise ValueError(f"--queries {path}:{n}: a JSON line needs a `query` or `question` field")
        if text:
            queries.append(text)
    if not queries:
        raise ValueError(f"--queries {path}: no queries in it")
    return queries[:QUERY_SAMPLE]
