"""A trained router on disk: `config.json` (the network's settings, model vocabulary, LLM texts, which
epoch was kept), `model.safetensors` and `nonpersonal.safetensors` (the personalised network and its
non-personalised twin) and `history.jsonl` (the users' logs, the policy's default context). Nothing is pickled.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import load_file, save_file

from searchrl.routing.gmtrouter.model import KINDS, GMTRouterNet, NetConfig, RouterNet
from searchrl.routing.gmtrouter.sage import SageNet

FORMAT = "searchrl-gmtrouter/2"
# Written before the HGT model existed: every such checkpoint is a SAGE one.
FORMAT_SAGE_ONLY = "searchrl-gmtrouter/1"
CONFIG_FILE = "config.json"
WEIGHTS = {True: "model.safetensors", False: "nonpersonal.safetensors"}
HISTORY_FILE = "history.jsonl"
NETS: dict[str, type[GMTRouterNet] | type[SageNet]] = {"hgt": GMTRouterNet, "sage": SageNet}


class CheckpointError(ValueError):
    """A checkpoint directory that is missing a file or does not match what loads it."""


def save_checkpoint(out: Path, config: NetConfig, nets: dict[bool, RouterNet]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, "kind": config.kind, "models": json.dumps(config.models)}
    for personalised, net in nets.items():
        state = {k: v.detach().contiguous() for k, v in net.state_dict().items()}  # type: ignore[attr-defined]
        save_file(state, str(out / WEIGHTS[personalised]), metadata=meta)
    (out / CONFIG_FILE).write_text(json.dumps({"format": FORMAT, **asdict(config)}, indent=2))


def load_config(directory: str | Path) -> NetConfig:
    cfg_path = Path(directory) / CONFIG_FILE
    if not cfg_path.is_file():
        raise CheckpointError(f"{cfg_path}: missing; train with `searchrl gmtrouter train`")
    raw = json.loads(cfg_path.read_text())
    fmt = raw.pop("format", None)
    if fmt == FORMAT_SAGE_ONLY:
        raw["kind"] = "sage"
    elif fmt != FORMAT:
        raise CheckpointError(f"{cfg_path}: not a {FORMAT} checkpoint")
    if raw.get("kind") not in KINDS:
        raise CheckpointError(f"{cfg_path}: field kind: {raw.get('kind')!r}; fix: one of {list(KINDS)}")
    return NetConfig(**raw)


def load_checkpoint(directory: str | Path, personalised: bool = True) -> RouterNet:
    directory = Path(directory)
    config = load_config(directory)
    cfg_path, weights = directory / CONFIG_FILE, directory / WEIGHTS[personalised]
    if not weights.is_file():
        raise CheckpointError(f"{weights}: missing; train with `searchrl gmtrouter train`")
    with safe_open(str(weights), framework="pt") as f:
        stored = json.loads((f.metadata() or {}).get("models", "null"))
    if stored != config.models:
        raise CheckpointError(
            f"{weights}: its model vocabulary {stored} differs from {cfg_path}'s {config.models}; "
            "the two files come from different trainings"
        )
    net = NETS[config.kind](config, personalised=personalised)
    try:
        net.load_state_dict(load_file(str(weights)))
    except RuntimeError as e:
        raise CheckpointError(f"{weights}: does not fit {cfg_path} ({str(e).splitlines()[0]})") from None
    net.eval()
    return net
