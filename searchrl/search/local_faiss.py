"""In-process dense backend: the manifest's index type over the passage store and the query encoder, checked
against the manifest (and the records of the store and shards, which must name the manifest's corpus)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from searchrl.search.base import BackendTraits, Passage
from searchrl.search.encode.encoder import Encoder
from searchrl.search.encode.profiles import PROFILES
from searchrl.search.index import cpu_threads
from searchrl.search.index.faiss_import import faiss
from searchrl.search.index.faiss_index import gpu_count, set_search_params
from searchrl.search.index.index_types import VectorIndex, kind_of
from searchrl.search.index.layout import (
    EMBED_DIR,
    EMBED_INFO,
    INDEX_FILE,
    MANIFEST,
    STORE_DIR,
    IndexValidationError,
    check_record,
    index_dir_identity,
    load_manifest,
)
from searchrl.search.index.rerank_index import RerankIndex
from searchrl.search.index.shards import EmbeddingShards, shard_paths
from searchrl.search.index.store import PassageStore, StoreError
from searchrl.search.index.torch_exact import ShardedExactIndex
from searchrl.search.index_settings import DEFAULT_EF_SEARCH, DEFAULT_NPROBE, DEFAULT_RERANK_DEPTH

if TYPE_CHECKING:
    from searchrl.search.settings import SearchConfig

log = logging.getLogger(__name__)


class LocalFaissBackend(BackendTraits):
    retriever = "dense"

    def __init__(
        self,
        index_dir: str | Path,
        model: str | None = None,
        device: str = "cpu",
        nprobe: int | None = None,
        ef_search: int | None = None,
        encoder: Encoder | None = None,
        query_batch_size: int = 64,
        rerank_depth: int | None = None,
        devices: list[str] | None = None,
        forward_batch: int | None = None,
        encoder_backend: str = "auto",
    ) -> None:
        self.index_dir = Path(index_dir)
        self.manifest = load_manifest(self.index_dir)
        self.index_type = self.manifest["index_type"]
        # Manifest content, not file times, identifies the index: caches keyed on it survive a restart.
        self.version = hashlib.sha256(json.dumps(self.manifest, sort_keys=True).encode()).hexdigest()[:16]
        built_with = self.manifest["model"]
        if model is not None and model != built_with:
            raise IndexValidationError(
                f"{self.index_dir / MANIFEST}: index was built with model {built_with!r}, "
                f"but the configuration asks for {model!r}"
            )
        self.on_gpu = False
        # A setting left out is the one the index measured when it was made (searchrl/search/index/recall.py).
        tuned = self.manifest.get("search_params") or {}
        self.search_params = {
            "nprobe": nprobe if nprobe is not None else tuned.get("nprobe", DEFAULT_NPROBE),
            "efSearch": ef_search if ef_search is not None else tuned.get("efSearch", DEFAULT_EF_SEARCH),
            "rerank_depth": rerank_depth
            if rerank_depth is not None
            else tuned.get("rerank_depth", DEFAULT_RERANK_DEPTH),
        }
        self.index: VectorIndex | faiss.Index = self._load(
            device,
            devices,
            self.search_params["nprobe"],
            self.search_params["efSearch"],
            self.search_params["rerank_depth"],
        )
        try:
            self.store = PassageStore(self.index_dir / self.manifest["files"].get("store", STORE_DIR))
        except (StoreError, OSError) as exc:
            raise IndexValidationError(str(exc)) from exc
        if len(self.store) != self.manifest["passages"]:
            raise IndexValidationError(
                f"{self.store.directory} holds {len(self.store)} passages, manifest says {self.manifest['passages']}"
            )
        if encoder is None:
            profile = PROFILES[self.manifest["profile"]["name"]]
            encoder = Encoder(
                built_with,
                device=device,
                profile=profile,
                max_seq_length=self.manifest.get("build", {}).get("max_seq_length"),
                forward_batch=forward_batch,
                backend=encoder_backend,
            )
        if encoder.dimension != self.manifest["dimension"]:
            raise IndexValidationError(
                f"{self.index_dir / MANIFEST}: dimension {self.manifest['dimension']} "
                f"but model {encoder.model_name} encodes {encoder.dimension}"
            )
        self.encoder = encoder
        self.query_batch_size = query_batch_size
        self._lock = threading.Lock()

    @classmethod
    def identity(cls, config: Any) -> dict[str, Any]:
        index = index_dir_identity(config.index_dir)
        return {"backend": config.backend, "index": index, "options": {"nprobe": config.nprobe}}

    @classmethod
    def from_config(cls, config: SearchConfig) -> LocalFaissBackend:
        if config.index_dir is None:
            raise ValueError("index_dir: required for the local backend")
        return cls(
            config.index_dir,
            model=config.model,
            device=config.device,
            nprobe=config.nprobe,
            ef_search=config.ef_search,
            rerank_depth=config.rerank_depth,
            forward_batch=config.forward_batch,
            encoder_backend=config.encoder_backend,
        )

    def _load(
        self, device: str, devices: list[str] | None, nprobe: int | None, ef_search: int | None, rerank_depth: int
    ) -> VectorIndex | faiss.Index:
        kind = kind_of(self.index_type)
        if not kind.reads_shards:
            index = self._load_faiss()
            if device == "cuda" and gpu_count() > 0:
                index = self._to_gpus(index)
            set_search_params(index, nprobe, ef_search, self.on_gpu)
            return index
        shards = self._load_shards()
        if kind.reranks:
            index = self._load_faiss()
            set_search_params(index, nprobe, ef_search, on_gpu=False)
            return RerankIndex(index, shards, rerank_depth)
        if devices is None:
            devices = ["cpu"]
            if device == "cuda":
                import torch

                devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())] or ["cpu"]
        self.on_gpu = any(d.startswith("cuda") for d in devices)
        return ShardedExactIndex(shards, devices)

    def _load_shards(self) -> EmbeddingShards:
        check_record(self.index_dir, EMBED_INFO, self.manifest)
        files = self.manifest["files"]
        paths = shard_paths(self.index_dir, int(files.get("shards", 0)))
        folder = self.index_dir / files.get("embeddings", EMBED_DIR)
        missing = [p.name for p in paths if not p.is_file()]
        if not paths or missing:
            raise IndexValidationError(
                f"{folder}: the {self.index_type} index type searches the embedding shards, "
                f"but {missing[:3] or 'all'} are missing"
            )
        try:
            shards = EmbeddingShards(paths)
        except (OSError, ValueError) as exc:
            raise IndexValidationError(f"{folder}: {exc}") from exc
        if len(shards) != self.manifest["passages"] or shards.dimension != self.manifest["dimension"]:
            raise IndexValidationError(
                f"{folder} holds {len(shards)} x {shards.dimension} vectors, manifest says "
                f"{self.manifest['passages']} x {self.manifest['dimension']}"
            )
        return shards

    def _load_faiss(self) -> faiss.Index:
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
            raise IndexValidationError(
                f"{path} holds {index.ntotal} vectors, manifest says {self.manifest['passages']} passages"
            )
        return index

    def _to_gpus(self, index: faiss.Index) -> faiss.Index:
        options = faiss.GpuMultipleClonerOptions()
        # Sharding splits the vectors across GPUs so an index larger than one card still fits.
        options.shard = True
        try:
            moved = faiss.index_cpu_to_all_gpus(index, co=options)
        except RuntimeError as exc:
            log.warning("index %s stays on CPU: %s", self.manifest["factory"], exc)
            return index
        self.on_gpu = True
        return moved

    @property
    def dimension(self) -> int:
        return int(self.manifest["dimension"])

    def search_sync(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if not queries:
            return []
        scores, rows = self.search_rows(queries, top_k)
        return [self._passages(s, r) for s, r in zip(scores, rows, strict=True)]

    def search_rows(self, queries: list[str], top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, store rows), each (len(queries), top_k), best first; -1 pads a short list."""
        with self._lock:
            cpu_threads.apply()
            vectors = self.encoder.encode_queries(queries, batch_size=self.query_batch_size)
            return self.index.search(vectors, top_k)

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
