"""BM25 over an index directory's passage store (the `bm25s` library), saved beside the dense index.

`bm25s` keeps the index as a sparse matrix of precomputed term scores in .npy arrays plus JSON vocabulary and
parameters (saved and loaded with allow_pickle=False), memory-mapped at load. Two flavours, chosen when the index is
built (`--bm25-flavour`): `bm25s` (lower-case word runs of two or more characters, bm25s's English stopwords,
Snowball stems, k1 1.5, b 0.75) and `pyserini`, as Search-R1's BM25 ranks with pyserini's `LuceneSearcher` defaults
(k1 0.9, b 0.4, Lucene's 33 English stopwords, Porter stems, words kept whole across `.` and `'`, possessives
dropped, as Anserini's English analyzer does). Queries go through the same steps as the index's passages.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from searchrl.search.base import BackendTraits, Passage
from searchrl.search.encode.encoder import passage_text
from searchrl.search.index.layout import (
    BM25_DIR,
    BM25_INFO,
    MANIFEST,
    STORE_DIR,
    IndexValidationError,
    index_dir_identity,
    load_manifest,
    read_json,
    remove_durably,
    write_json_atomic,
)
from searchrl.search.index.store import PassageStore, StoreError

if TYPE_CHECKING:
    from searchrl.search.settings import SearchConfig

log = logging.getLogger(__name__)

PARAMS = {"library": "bm25s", "method": "lucene", "k1": 1.5, "b": 0.75, "stopwords": "en", "stemmer": "english"}
# Lucene's EnglishAnalyzer stop set, which Anserini's default analyzer uses.
LUCENE_STOPWORDS = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with"
).split()
FLAVOURS: dict[str, dict] = {
    "bm25s": PARAMS,
    "pyserini": {
        **PARAMS, "flavour": "pyserini", "k1": 0.9, "b": 0.4, "stopwords": LUCENE_STOPWORDS, "stemmer": "porter",
        "token_pattern": r"(?u)\w+(?:[.'’:]\w+)*", "possessives": True,
    },
}  # fmt: skip
DEFAULT_PATTERN = r"(?u)\b\w\w+\b"
_POSSESSIVE = re.compile(r"['’]s\b")


def _stemmer(params: dict = PARAMS):
    import Stemmer

    return Stemmer.Stemmer(params["stemmer"])


def _cleaned(text: str, params: dict) -> str:
    """The text as the flavour's tokenizer reads it: possessives dropped where the flavour drops them."""
    return _POSSESSIVE.sub("", text) if params.get("possessives") else text


def build_bm25(out: Path, checksum: str, flavour: str = "bm25s") -> dict:
    """Index every store row (title line + text, as embedded) into out/bm25; reused when its record matches."""
    import bm25s
    from bm25s.tokenization import Tokenizer
    from tqdm import tqdm

    params = FLAVOURS[flavour]
    info = {"corpus_sha256": checksum, **params}
    previous = read_json(out / BM25_INFO)
    if previous and {k: previous.get(k) for k in info} == info and (out / BM25_DIR).is_dir():
        log.info("BM25 index already built, reusing it")
        return previous
    remove_durably(out / BM25_INFO)
    store = PassageStore(out / STORE_DIR)
    pattern = params.get("token_pattern", DEFAULT_PATTERN)
    tokenizer = Tokenizer(splitter=pattern, stopwords=params["stopwords"], stemmer=_stemmer(params))
    texts = (_cleaned(passage_text(store.title(r), store.text(r)), params) for r in range(len(store)))
    ids = list(
        tqdm(tokenizer.streaming_tokenize(texts), total=len(store), desc="bm25", unit=" passages", dynamic_ncols=True)
    )
    retriever = bm25s.BM25(method=params["method"], k1=params["k1"], b=params["b"])
    retriever.index((ids, tokenizer.get_vocab_dict()), show_progress=False)
    del ids
    tmp = out / (BM25_DIR + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    retriever.save(str(tmp), allow_pickle=False)
    shutil.rmtree(out / BM25_DIR, ignore_errors=True)
    tmp.rename(out / BM25_DIR)
    info.update(passages=len(store), vocabulary=len(retriever.vocab_dict))
    write_json_atomic(out / BM25_INFO, info)
    return info


class BM25Backend(BackendTraits):
    """Lexical search over an index directory built with `--bm25`."""

    retriever = "bm25"

    def __init__(self, index_dir: str | Path) -> None:
        import bm25s

        self.index_dir = Path(index_dir)
        self.manifest = load_manifest(self.index_dir)
        self.version = hashlib.sha256(json.dumps(self.manifest, sort_keys=True).encode()).hexdigest()[:16]
        record = self.manifest.get("bm25")
        folder = self.manifest.get("files", {}).get("bm25")
        if not record or not folder:
            raise IndexValidationError(
                f"{self.index_dir / MANIFEST}: no BM25 index in this directory; rebuild it with build_index --bm25"
            )
        on_disk = read_json(self.index_dir / BM25_INFO)
        if on_disk is None or on_disk.get("corpus_sha256") != self.manifest["corpus"]["sha256"]:
            raise IndexValidationError(
                f"{self.index_dir / BM25_INFO} does not record the manifest's corpus "
                f"{self.manifest['corpus']['sha256'][:12]}: an interrupted rebuild; re-run it"
            )
        try:
            self.store = PassageStore(self.index_dir / self.manifest["files"].get("store", STORE_DIR))
        except (StoreError, OSError) as exc:
            raise IndexValidationError(str(exc)) from exc
        try:
            self.retriever = bm25s.BM25.load(str(self.index_dir / folder), mmap=True, allow_pickle=False)
        except (OSError, ValueError, KeyError) as exc:
            raise IndexValidationError(f"{self.index_dir / folder} cannot be loaded: {exc}") from exc
        n_docs = int(self.retriever.scores.get("num_docs", len(self.store)))
        if n_docs != len(self.store):
            raise IndexValidationError(
                f"{self.index_dir / folder} indexes {n_docs} passages, the store holds {len(self.store)}"
            )
        # The index's own tokenisation, which its record names (an index made before flavours: bm25s's).
        self.params = {**PARAMS, **{k: v for k, v in on_disk.items() if k in FLAVOURS["pyserini"]}}
        self.stemmer = _stemmer(self.params)
        self._lock = threading.Lock()

    @classmethod
    def identity(cls, config: Any) -> dict[str, Any]:
        return {"backend": config.backend, "index": index_dir_identity(config.index_dir), "options": {}}

    @classmethod
    def from_config(cls, config: SearchConfig) -> BM25Backend:
        if config.index_dir is None:
            raise ValueError("index_dir: required for the bm25 backend")
        return cls(config.index_dir)

    def search_rows(self, queries: list[str], top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows), each (len(queries), top_k), best first; rows -1 where fewer passages share a term."""
        import bm25s

        k = min(top_k, len(self.store))
        tokens = bm25s.tokenize(
            [_cleaned(q, self.params) for q in queries],
            token_pattern=self.params.get("token_pattern", DEFAULT_PATTERN),
            stopwords=self.params["stopwords"],
            stemmer=self.stemmer,
            return_ids=False,
            show_progress=False,
        )
        with self._lock:
            rows, scores = self.retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        rows = np.asarray(rows, dtype=np.int64)
        scores = np.asarray(scores, dtype=np.float32)
        # A passage sharing no term with the query scores 0: it is no match, whatever its rank.
        rows[scores <= 0] = -1
        if k < top_k:
            pad = ((0, 0), (0, top_k - k))
            rows, scores = np.pad(rows, pad, constant_values=-1), np.pad(scores, pad, constant_values=0.0)
        return scores, rows

    def search_sync(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if not queries:
            return []
        scores, rows = self.search_rows(queries, top_k)
        out = []
        for line_scores, line_rows in zip(scores.tolist(), rows.tolist(), strict=True):
            hits = []
            for score, row in zip(line_scores, line_rows, strict=True):
                if row >= 0:
                    record = self.store[row]
                    hits.append(Passage(id=record.id, title=record.title, text=record.text, score=float(score)))
            out.append(hits)
        return out

    async def search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        return await asyncio.to_thread(self.search_sync, queries, top_k)

    async def aclose(self) -> None:
        return None
