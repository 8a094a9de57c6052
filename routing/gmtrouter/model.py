"""The GMTRouter network and its checkpoint (safetensors weights + JSON config and model vocabulary).

Response nodes start from their query, their model and the rating; heterogeneous SAGE layers carry
that into sessions and users. A (user, query, model) triple is scored from the user's node, the query
embedding and the model embedding, with their element-wise products so the user can re-weight which
model suits which kind of query. `personalised=False` drops users and sessions: the same scorer on
(query, model) alone, the non-personalised baseline.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch_geometric.data import HeteroData
from torch_geometric.nn import HeteroConv, SAGEConv

from routing.gmtrouter.graph import EDGE_TYPES

FORMAT = "searchrl-gmtrouter/1"
CONFIG_FILE = "config.json"
WEIGHTS = {True: "model.safetensors", False: "nonpersonal.safetensors"}
HISTORY_FILE = "history.jsonl"
# Query and model features enter responses through `response_mlp` (their product needs the rating's
# sign); the layers carry responses into sessions and users and back.
CONV_EDGES = [et for et in EDGE_TYPES if et[0] not in ("query", "model") or et[2] == "user"]


class CheckpointError(ValueError):
    """A checkpoint directory that is missing a file or does not match what loads it."""


@dataclass
class NetConfig:
    models: list[str]
    query_dim: int
    encoder: str = "all-MiniLM-L6-v2"
    hidden: int = 64
    layers: int = 2
    session_gap_minutes: float = 30.0
    # Per-model mean rating and count in the training logs: the popularity baseline.
    popularity: dict[str, list[float]] = field(default_factory=dict)


class GMTRouterNet(nn.Module):
    def __init__(self, config: NetConfig, personalised: bool = True) -> None:
        super().__init__()
        h = config.hidden
        self.config = config
        self.personalised = personalised
        self.query_proj = nn.Linear(config.query_dim, h)
        self.model_emb = nn.Embedding(len(config.models), h)
        self.response_mlp = nn.Sequential(nn.Linear(3 * h + 2, h), nn.ReLU(), nn.Linear(h, h))
        self.user_init = nn.Parameter(torch.zeros(h))
        self.session_init = nn.Parameter(torch.zeros(h))
        with warnings.catch_warnings():
            # Model nodes are sources only (their embedding is the model's identity); PyG warns about that.
            warnings.filterwarnings("ignore", message="There exist node types", category=UserWarning)
            self.convs = nn.ModuleList(
                HeteroConv({et: SAGEConv(h, h) for et in CONV_EDGES}) for _ in range(config.layers)
            )
        self.decoder = nn.Sequential(nn.Linear(6 * h, h), nn.ReLU(), nn.Linear(h, 1))

    def user_states(self, graph: HeteroData) -> torch.Tensor:
        """One vector per user node, from message passing over the user's sessions and ratings."""
        h = self.config.hidden
        q = self.query_proj(graph["query"].x)
        q_idx = graph["query", "asks", "response"].edge_index[0]
        m_idx = graph["model", "answers", "response"].edge_index[0]
        fb = graph["response"].feedback.unsqueeze(1)
        qr, mr = q[q_idx], self.model_emb(m_idx)
        # The signed product says "this model suited / failed this kind of query" in one vector.
        resp = self.response_mlp(torch.cat([qr, mr, fb, 2 * fb - 1, qr * mr * (2 * fb - 1)], dim=1))
        x = {
            "user": self.user_init.expand(graph["user"].num_nodes, h),
            "session": self.session_init.expand(graph["session"].num_nodes, h),
            "response": resp,
            "model": self.model_emb.weight,
            "query": q,
        }
        edges = {et: graph[et].edge_index for et in CONV_EDGES}
        for conv in self.convs:
            out = conv(x, edges)
            x = {k: (x[k] + torch.relu(out[k])) if k in out else v for k, v in x.items()}
        return x["user"]

    def score(self, users: torch.Tensor | None, queries: torch.Tensor, models: torch.Tensor) -> torch.Tensor:
        """Scores of aligned (user state, query embedding, model index) rows; users None when not personalised."""
        q = self.query_proj(queries)
        m = self.model_emb(models)
        u = users if (self.personalised and users is not None) else torch.zeros_like(q)
        return self.decoder(torch.cat([u, q, m, q * m, u * m, u * q * m], dim=1)).squeeze(1)


def save_checkpoint(out: Path, config: NetConfig, nets: dict[bool, GMTRouterNet]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, "models": json.dumps(config.models)}
    for personalised, net in nets.items():
        state = {k: v.detach().contiguous() for k, v in net.state_dict().items()}
        save_file(state, str(out / WEIGHTS[personalised]), metadata=meta)
    (out / CONFIG_FILE).write_text(json.dumps({"format": FORMAT, **asdict(config)}, indent=2))


def load_checkpoint(directory: str | Path, personalised: bool = True) -> GMTRouterNet:
    directory = Path(directory)
    cfg_path, weights = directory / CONFIG_FILE, directory / WEIGHTS[personalised]
    for path in (cfg_path, weights):
        if not path.is_file():
            raise CheckpointError(f"{path}: missing; train with `python -m routing.gmtrouter train`")
    raw = json.loads(cfg_path.read_text())
    if raw.pop("format", None) != FORMAT:
        raise CheckpointError(f"{cfg_path}: not a {FORMAT} checkpoint")
    config = NetConfig(**raw)
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as f:
        stored = json.loads((f.metadata() or {}).get("models", "null"))
    if stored != config.models:
        raise CheckpointError(
            f"{weights}: its model vocabulary {stored} differs from {cfg_path}'s {config.models}; "
            "the two files come from different trainings"
        )
    net = GMTRouterNet(config, personalised=personalised)
    state = load_file(str(weights))
    try:
        net.load_state_dict(state)
    except RuntimeError as e:
        raise CheckpointError(f"{weights}: does not fit {cfg_path} ({str(e).splitlines()[0]})") from None
    net.eval()
    return net
