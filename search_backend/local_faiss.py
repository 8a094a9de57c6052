"""In-process backend: a FAISS index, its passage store and the query encoder, checked against the manifest."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from search_backend.base import Passage
from search_backend.build_index import INDEX_FILE, MANIFEST, STORE_DIR
from search_backend.faiss_import import faiss
from search_backend.faiss_index import gpu_count, set_search_params
from search_backend.profiles import PROFILES
from search_backend.store import PassageStore, StoreError

if TYPE_CHECKING:
    from search_backend.config import SearchConfig
    from search_backend.encoder import Encoder

log = logging.getLogger(__name__)


class IndexValidationError(RuntimeError):
    """The index directory is unusable; the message names the offending file."""


def load_manifest(index_dir: Path) -> dict:
    path = index_dir / MANIFEST
    if not path.is_file():
        raise IndexValidationError(f"{path} not found: not an index directory, or its build never finished")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise IndexValidationError(f"{path} is not valid JSON: {exc}") from exc
    missing = [k for k in ("model", "dimension", "passages", "factory", "profile", "files") if k not in manifest]
    if missing:
        raise IndexValidationError(f"{path} lacks {missing}")
    return manifest


class LocalFaissBackend:
    def __init__(self, index_dir: str | Path, model: str | None = None, device: str = "cpu", nprobe: int | None = 64,
                 ef_search: int | None = 128, encoder: Encoder | None = None, query_batch_size: int = 64) -> None:
        self.index_dir = Path(index_dir)
        self.manifest = load_manifest(self.index_dir)
        # Manifest content, not file times, identifies the index: caches keyed on it survive a restart.
        self.version = hashlib.sha256(json.dumps(self.manifest, sort_keys=True).encode()).hexdigest()[:16]
        built_with = self.manifest["model"]
        if model is not None and model != built_with:
            raise IndexValidationError(f"{self.index_dir / MANIFEST}: index was built with model {built_with!r}, "
                                       f"but the configuration asks for {model!r}")
        self.index = self._load_index()
        try:
            self.store = PassageStore(self.index_dir / self.manifest["files"].get("store", STORE_DIR))
        except (StoreError, OSError) as exc:
            raise IndexValidationError(str(exc)) from exc
        if len(self.store) != self.manifest["passages"]:
            raise IndexValidationError(f"{self.store.directory} holds {len(self.store)} passages, "
                                       f"manifest says {self.manifest['passages']}")
        if encoder is None:
            from search_backend.encoder import Encoder

            profile = PROFILES[self.manifest["profile"]["name"]]
            encoder = Encoder(built_with, device=device, profile=profile,
                              max_seq_length=self.manifest.get("build", {}).get("max_seq_length"))
        if encoder.dimension != self.manifest["dimension"]:
            raise IndexValidationError(f"{self.index_dir / MANIFEST}: dimension {self.manifest['dimension']} "
                                       f"but model {encoder.model_name} encodes {encoder.dimension}")
        self.encoder = encoder
        self.query_batch_size = query_batch_size
        self.on_gpu = False
        if device == "cuda" and gpu_count() > 0:
            self._to_gpus()
        set_search_params(self.index, nprobe, ef_search, self.on_gpu)
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: SearchConfig) -> LocalFaissBackend:
        if config.index_dir is None:
            raise ValueError("index_dir: required for the local backend")
        return cls(config.index_dir, model=config.model, device=config.device, nprobe=config.nprobe,
                   ef_search=config.ef_search)

    def _load_index(self) -> faiss.Index:
        path = self.index_dir / self.manifest["files"].get("index", INDEX_FILE)
        expected = self.manifest["files"].get("index_bytes")
        size = path.stat().st_size if path.exists() else -1
        if size < 0:
            raise IndexValidationError(f"{path} not found")
        if expected is not None and size != expected:
            raise IndexValidationError(f"{path} is {size} bytes but manifest says {expected} (truncated?)")
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as exc:
            raise IndexValidationError(f"{path} cannot be read by FAISS: {exc}") from exc
        if index.d != self.manifest["dimension"]:
            raise IndexValidationError(f"{path} has dimension {index.d}, manifest says {self.manifest['dimension']}")
        if index.ntotal != self.manifest["passages"]:
            raise IndexValidationError(f"{path} holds {index.ntotal} vectors, manifest says "
                                       f"{self.manifest['passages']} passages")
        return index

    def _to_gpus(self) -> None:
        options = faiss.GpuMultipleClonerOptions()
        # Sharding splits the vectors across GPUs so an index larger than one card still fits.
        options.shard = True
        try:
            self.index = faiss.index_cpu_to_all_gpus(self.index, co=options)
            self.on_gpu = True
        except RuntimeError as exc:
            log.warning("index %s stays on CPU: %s", self.manifest["factory"], exc)

    @property
    def dimension(self) -> int:
        return int(self.manifest["dimension"])

    def search_sync(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if not queries:
            return []
        with self._lock:
            vectors = self.encoder.encode_queries(queries, batch_size=self.query_batch_size)
            scores, rows = self.index.search(vectors, top_k)
        return [self._passages(s, r) for s, r in zip(scores, rows, strict=True)]

    def _passages(self, scores: np.ndarray, rows: np.ndarray) -> list[Passage]:
        out = []
        for score, row in zip(scores.tolist(), rows.tolist(), strict=True):
            if row < 0:
                continue
            record = self.store[row]
            out.append(Passage(id=record.id, title=record.title, text=record.text, score=float(score)))
        return out

    async def search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        # Encoding and FAISS both block for milliseconds to seconds; a thread keeps the event loop serving.
        return await asyncio.to_thread(self.search_sync, queries, top_k)

    async def aclose(self) -> None:
        return None
