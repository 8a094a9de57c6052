"""The GMTRouter network of the paper (original: `src/graph.py`): HGT layers over the interaction graph give
each user a state; a cross-attention scorer rates an LLM for a (user, query) pair.

The scorer projects the user state, the query embedding and the LLM's text embedding to one width; the
LLM attends to the (user, query) pair and the attended vector, beside the LLM's own, gives the logit. LLMs
enter only through their text embedding, so a model added to the pool after training is scored from its
description. `personalised=False` is the non-personalised twin: no graph, a zero user state.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import nn
from torch_geometric.data import HeteroData
from torch_geometric.nn import HGTConv

from searchrl.routing.gmtrouter.graph import (
    EDGE_TYPES,
    NODE_TYPES,
    SCALAR_NODES,
    LLMTable,
    TextTable,
    UserHistory,
    build_graph,
)

KINDS = ("hgt", "sage")


@dataclass
class NetConfig:
    models: list[str]
    query_dim: int
    kind: str = "hgt"
    encoder: str = "all-MiniLM-L6-v2"
    # What each training LLM's node embeds (its description, else its name).
    llm_texts: dict[str, str] = field(default_factory=dict)
    hidden: int = 128
    layers: int = 3
    heads: int = 4
    # The temporal session -> previous-session edges (the original's `multi_turn`).
    temporal: bool = True
    scorer_hidden: int = 256
    dropout: float = 0.1
    session_gap_minutes: float = 30.0
    # Per-model mean rating and count in the training logs: the popularity baseline.
    popularity: dict[str, list[float]] = field(default_factory=dict)
    # Which epoch's weights were kept, by which validation metric (empty: the last epoch's).
    selection: dict = field(default_factory=dict)


class RouterNet(Protocol):
    """What the router needs of a trained network, HGT (the paper's) or SAGE (the baseline)."""

    config: NetConfig
    personalised: bool

    def user_states(self, histories: Sequence[UserHistory], texts: TextTable, llms: LLMTable) -> torch.Tensor | None:
        """One state per history (None for a non-personalised network)."""
        ...

    def score(self, users: Grid, queries: Grid, llm_rows: torch.Tensor, llms: LLMTable) -> torch.Tensor:
        """Logits of (user, query, LLM row) triples; users and queries as tables with a row index per triple."""
        ...


@dataclass
class Grid:
    """A table of vectors and, per scored triple, the row it takes: each distinct user or query is
    projected once however many LLMs it is scored against. `table` None: no user states (a zero state)."""

    table: torch.Tensor | None
    index: torch.Tensor

    def rows(self, width: int) -> torch.Tensor:
        if self.table is None:
            return torch.zeros((len(self.index), width))
        return self.table[self.index]


class HGTEncoder(nn.Module):
    """HGT layers, each followed by dropout and layer norm, over the graph of `graph.py`."""

    def __init__(self, text_dim: int, hidden: int, layers: int, heads: int, dropout: float) -> None:
        super().__init__()
        metadata = (NODE_TYPES, EDGE_TYPES)
        convs = []
        for i in range(layers):
            dims = {t: text_dim for t in NODE_TYPES} | dict.fromkeys(SCALAR_NODES, 1)
            if i > 0:
                dims |= {"user": hidden, "session": hidden}
            convs.append(HGTConv(dims, hidden, metadata, heads=heads))
        self.convs = nn.ModuleList(convs)
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))
        self.dropout = nn.Dropout(dropout)

    def forward(self, graph: HeteroData) -> dict[str, torch.Tensor]:
        h = dict(graph.x_dict)
        edges = {et: graph[et].edge_index for et in EDGE_TYPES}
        for conv, norm in zip(self.convs, self.norms, strict=True):
            out = conv(h, edges)
            h.update({k: norm(self.dropout(v)) for k, v in out.items() if v is not None})
        return h


class CrossAttentionScorer(nn.Module):
    """The original's PreferencePredictor: the LLM's projection attends to the projected (user, query) pair
    and [attended, LLM] gives the logit. Same parameters and maths as running nn.MultiheadAttention on each
    triple, computed factored: keys and values of each distinct user and query, the query of each LLM,
    then per triple only the two-key softmax and the output layers."""

    def __init__(self, user_dim: int, text_dim: int, hidden: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.user_proj = nn.Linear(user_dim, hidden)
        self.query_proj = nn.Linear(text_dim, hidden)
        self.llm_proj = nn.Linear(text_dim, hidden)
        self.cross_attn = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.out = nn.Sequential(nn.ReLU(), nn.Dropout(dropout), nn.Linear(2 * hidden, 1))

    def forward(
        self,
        users: torch.Tensor,
        queries: torch.Tensor,
        llms: torch.Tensor,
        u_idx: torch.Tensor,
        q_idx: torch.Tensor,
        l_idx: torch.Tensor,
    ) -> torch.Tensor:
        att = self.cross_attn
        w_q, w_k, w_v = att.in_proj_weight.chunk(3)
        b_q, b_k, b_v = att.in_proj_bias.chunk(3)
        u, q, m = self.user_proj(users), self.query_proj(queries), self.llm_proj(llms)
        n, width, heads = len(l_idx), m.shape[1], self.heads
        per_head = width // heads
        target = nn.functional.linear(m, w_q, b_q)[l_idx].view(n, heads, per_head)
        # The output projection is linear, so each head's value is projected once per user and per query:
        # a triple then only mixes two (heads, width) blocks by its attention weights.
        w_out = att.out_proj.weight.view(width, heads, per_head)
        keys, outs = [], []
        for x, idx in ((u, u_idx), (q, q_idx)):
            keys.append(nn.functional.linear(x, w_k, b_k).view(-1, heads, per_head)[idx])
            v = nn.functional.linear(x, w_v, b_v).view(-1, heads, per_head)
            outs.append(torch.einsum("xhd,ohd->xho", v, w_out)[idx])
        logits = torch.stack([(target * k).sum(-1) for k in keys], dim=-1) / per_head**0.5
        alpha = torch.softmax(logits, dim=-1)
        attended = (alpha[..., :1] * outs[0] + alpha[..., 1:] * outs[1]).sum(1) + att.out_proj.bias
        return self.out(torch.cat([attended, m[l_idx]], dim=1)).squeeze(1)


class GMTRouterNet(nn.Module):
    def __init__(self, config: NetConfig, personalised: bool = True) -> None:
        super().__init__()
        self.config = config
        self.personalised = personalised
        d, h = config.query_dim, config.hidden
        self.encoder = HGTEncoder(d, h, config.layers, config.heads, config.dropout) if personalised else None
        self.scorer = CrossAttentionScorer(h, d, config.scorer_hidden, config.heads, config.dropout)

    def graph(self, histories: Sequence[UserHistory], texts: TextTable, llms: LLMTable) -> HeteroData:
        return build_graph(histories, texts, llms.rows, llms.features(), temporal=self.config.temporal)

    def states(self, graph: HeteroData) -> torch.Tensor:
        assert self.encoder is not None
        with warnings.catch_warnings():
            # LLM, query and response nodes only send; PyG warns that they receive nothing.
            warnings.filterwarnings("ignore", message="There exist node types", category=UserWarning)
            return self.encoder(graph)["user"]

    def user_states(self, histories: Sequence[UserHistory], texts: TextTable, llms: LLMTable) -> torch.Tensor | None:
        if not self.personalised:
            return None
        return self.states(self.graph(histories, texts, llms))

    def score(self, users: Grid, queries: Grid, llm_rows: torch.Tensor, llms: LLMTable) -> torch.Tensor:
        table = users.table if self.personalised and users.table is not None else None
        if table is None:
            table, u_idx = torch.zeros((1, self.config.hidden)), torch.zeros_like(users.index)
        else:
            u_idx = users.index
        assert queries.table is not None
        return self.scorer(table, queries.table, llms.features(), u_idx, queries.index, llm_rows)
