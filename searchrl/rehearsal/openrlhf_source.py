"""OpenRLHF's experience maker, rebuilt from its installed source without its GPU imports.

`openrlhf.trainer.ppo_utils.experience_maker` imports DeepSpeed and the model classes at module
level. The class itself (micro-batching the samples, dispatching the model forwards, rewards,
advantages and returns) needs only torch, Ray and three pure functions of `openrlhf.models.utils`,
so those definitions are taken from the source with `ast` and run unchanged, as openrlhf_flags does
for the parser. The rehearsal then runs OpenRLHF's own code between the rollout and the replay buffer.
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import logging
import time
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any, List, Optional, Tuple, Union  # noqa: UP035 - names the exec'd source uses


def _package() -> Path:
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("openrlhf is not installed: pip install --no-deps openrlhf==0.11.2")
    return Path(next(iter(spec.submodule_search_locations)))


def _definitions(path: Path, names: set[str]) -> ast.Module:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = [
        node
        for node in tree.body
        if (isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in names)
        or (isinstance(node, ast.Assign) and any(getattr(t, "id", None) in names for t in node.targets))
    ]
    found = {getattr(n, "name", None) or n.targets[0].id for n in body}  # type: ignore[attr-defined]
    if found != names:
        raise RuntimeError(f"{path}: missing {sorted(names - found)} (OpenRLHF changed its layout)")
    return ast.Module(body=body, type_ignores=[])


@cache
def experience_maker_class() -> type:
    """`RemoteExperienceMaker` of the installed OpenRLHF, its code unchanged."""
    import ray
    import torch
    import torch.nn.functional as F  # noqa: N812
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ppo_utils.length_penalty import apply_length_penalties
    from openrlhf.utils.seqlen_balancing import get_minimum_num_micro_batch_size, get_seqlen_balanced_partitions

    root = _package()
    namespace: dict[str, Any] = {
        "itertools": itertools,
        "time": time,
        "timedelta": timedelta,
        "List": List,  # noqa: UP006
        "Tuple": Tuple,  # noqa: UP006
        "Optional": Optional,
        "Union": Union,
        "ray": ray,
        "torch": torch,
        "F": F,
        "Experience": Experience,
        "apply_length_penalties": apply_length_penalties,
        "get_minimum_num_micro_batch_size": get_minimum_num_micro_batch_size,
        "get_seqlen_balanced_partitions": get_seqlen_balanced_partitions,
        "RayActorGroup": Any,
        "logger": logging.getLogger("openrlhf.experience_maker"),
    }
    models = root / "models" / "utils.py"
    maker = root / "trainer" / "ppo_utils" / "experience_maker.py"
    pure = {"KL_IS_WEIGHT_CLIP", "compute_approx_kl", "compute_reward", "masked_mean"}
    exec(compile(_definitions(models, pure), str(models), "exec"), namespace)  # noqa: S102 - OpenRLHF's code
    exec(compile(_definitions(maker, {"RemoteExperienceMaker"}), str(maker), "exec"), namespace)  # noqa: S102
    return namespace["RemoteExperienceMaker"]
