"""The model an evaluation runs: a model config, or a Hugging Face checkpoint folder (what a training stage
writes with save_pretrained) with the prompt template it was trained with.

A checkpoint folder carries weights and tokenizer but not the prompt; `--template base|chat` takes the
bundled base or chat template, `--template configs/models/X.yaml` the model config it was trained from.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from searchrl.config import ConfigError, load
from searchrl.paths import CONFIGS
from searchrl.stage.config import ModelConfig

MODEL_CONFIGS = CONFIGS / "models"
TEMPLATES = {"base": MODEL_CONFIGS / "qwen2.5-7b-base.yaml", "chat": MODEL_CONFIGS / "qwen2.5-7b-instruct.yaml"}


def is_checkpoint(path: str | Path) -> bool:
    return Path(path).is_dir() and (Path(path) / "config.json").is_file()


def checkpoint_name(folder: Path) -> str:
    # Stages write `runs/<stage>/final`: the parent's name tells checkpoints apart where `final` would not.
    parts = folder.resolve().parts
    return "-".join(parts[-2:]) if len(parts) >= 2 else parts[-1]


def template_config(template: str) -> ModelConfig:
    if template in TEMPLATES:
        return load(ModelConfig, TEMPLATES[template])
    if Path(template).is_file():
        return load(ModelConfig, template)
    raise ConfigError(f"--template {template!r}: give base, chat, or the model config (configs/models/X.yaml)")


def resolve_model(spec: str, template: str | None = None) -> ModelConfig:
    """A model config file, or a checkpoint folder with `template` choosing the prompt."""
    path = Path(spec)
    if path.is_dir():
        if not is_checkpoint(path):
            raise ConfigError(f"--model {spec}: a folder without config.json is not a Hugging Face checkpoint")
        if template is None:
            raise ConfigError(
                f"--model {spec} is a checkpoint folder: say how it was prompted in training with "
                "--template base|chat, or the model config it was trained from (--template configs/models/X.yaml)"
            )
        base = template_config(template)
        folder = str(path.resolve())
        return base.model_copy(update={"name": checkpoint_name(path), "model_path": folder, "tokenizer_path": None})
    if template is not None:
        raise ConfigError("--template applies to a checkpoint folder; a model config carries its own template")
    if not path.is_file():
        raise ConfigError(f"--model {spec}: no such model config file or checkpoint folder")
    return load(ModelConfig, path)


def template_id(model: ModelConfig) -> dict[str, str]:
    """What identifies the prompt: the kind and a digest of every field that shapes the rendered text."""
    fields = model.model_dump(include={"kind", "template", "system", "user", "assistant_prefix"})
    if model.chat_template_kwargs:  # only when set: earlier runs' template ids stay the same
        fields["chat_template_kwargs"] = model.chat_template_kwargs
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    return {"kind": model.kind, "sha256": digest}
