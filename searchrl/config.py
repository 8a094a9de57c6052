"""YAML configs validated into pydantic models, with `key=value` overrides from the command line.

Errors name the file, the dotted key and what was expected, because a typo found after a GPU job
has started costs hours.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A config file or override that does not validate; the message names file, key and expectation."""


def parse_overrides(items: Iterable[str]) -> list[tuple[str, Any]]:
    """`key=value` pairs; values are read as YAML scalars (16 -> int, true -> bool, 2e-6 -> float)."""
    pairs = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override `{item}`: expected key=value, e.g. reward.answer_metric=f1")
        value = yaml.safe_load(raw) if raw.strip() else ""
        pairs.append((key.strip(), value))
    return pairs


def apply_override(data: dict[str, Any], key: str, value: Any) -> None:
    """Set a dotted key. Inside a mapping whose keys are themselves dotted (the OpenRLHF flags), the
    rest of the key is one flag name: `openrlhf.rollout.n_samples_per_prompt=8`."""
    parts = key.split(".")
    node = data
    while parts:
        for cut in range(len(parts), 0, -1):
            head = ".".join(parts[:cut])
            if head in node:
                break
        else:
            cut = len(parts) if any("." in k for k in node) else 1
            head = ".".join(parts[:cut])
        rest = parts[cut:]
        if not rest:
            node[head] = value
            return
        child = node.get(head)
        if child is None:
            child = node[head] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override `{key}`: `{head}` is a value, not a section")
        node, parts = child, rest


def format_errors(source: str, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        got = e.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"{source}: {key}: {e['msg']}{shown}")
    return "\n".join(lines)


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such config file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def validate(model: type[M], data: dict[str, Any], source: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_errors(source, e)) from None


def load(model: type[M], path: str | Path, overrides: Iterable[str] = ()) -> M:
    data = read_yaml(path)
    for key, value in parse_overrides(overrides):
        apply_override(data, key, value)
    return validate(model, data, str(path))
