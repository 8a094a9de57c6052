"""A digest of a model's weights, so two copies (an engine's, a saved checkpoint's) can be compared by value."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import torch


def weights_digest(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """A hash of every named tensor's values (as float32), in name order: equal digests, equal weights."""
    h = hashlib.sha256()
    for name, tensor in sorted(named, key=lambda kv: kv[0]):
        h.update(name.encode())
        h.update(tensor.detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]
