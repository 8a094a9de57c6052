"""How an index directory is opened: the settings the stage config's `search:` section and the retrieval
server share, declared once so the two cannot disagree on a default or a bound, with the hybrid backend's
rank-fusion settings (`HybridConfig`) among them.

Schemas only, below every backend: the server's config loads them without the backends or the web-search code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Search settings of an index whose manifest records none (made before indexes measured their recall).
DEFAULT_NPROBE = 64
DEFAULT_EF_SEARCH = 128
DEFAULT_RERANK_DEPTH = 100


class HybridConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dense_weight: float = Field(default=1.0, ge=0, description="weight of the dense ranking in the fusion")
    bm25_weight: float = Field(default=1.0, ge=0, description="weight of the BM25 ranking in the fusion")
    rrf_k: float = Field(default=60.0, gt=0, description="rank offset: larger flattens the top ranks' advantage")
    depth: int = Field(default=100, ge=1, description="passages taken from each ranking before fusing")


class IndexSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index_dir: Path | None = None
    model: str | None = Field(default=None, description="must match the index manifest's model when set")
    device: Literal["cpu", "cuda"] = "cpu"
    # None: what the index measured when it was made (its manifest's `search_params`: the cheapest setting that
    # keeps 0.99 of the exact top-10), else the value in brackets, for an index made before it measured.
    nprobe: int | None = Field(
        default=None, ge=1, description="IVF lists probed per query (default: the index's measured setting, else 64)"
    )
    ef_search: int | None = Field(
        default=None, ge=1, description="HNSW search breadth (default: the index's measured setting, else 128)"
    )
    rerank_depth: int | None = Field(
        default=None,
        ge=1,
        description="compact index type: candidates re-scored exactly per query (default: the index's measured "
        f"setting, else {DEFAULT_RERANK_DEPTH})",
    )
    forward_batch: int | None = Field(
        default=None,
        ge=1,
        description="queries per encoder forward pass: a batch runs shortest first in chunks of this size "
        "(default: 16 on CPU, the whole batch on CUDA)",
    )
    encoder_backend: Literal["auto", "torch", "onnx", "onnx-int8"] = Field(
        default="auto",
        description="query encoder on CPU: auto (ONNX Runtime where its vectors match PyTorch's at load), torch, "
        "onnx, onnx-int8 (opt-in: approximate vectors); CUDA always runs PyTorch",
    )
    hybrid: HybridConfig = Field(default_factory=HybridConfig, description="fusion settings, for backend: hybrid")

    def index_settings(self) -> dict:
        """These fields alone, as keyword arguments for another model built on IndexSettings."""
        return {name: getattr(self, name) for name in IndexSettings.model_fields}
