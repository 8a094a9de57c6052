"""The SAGE baseline (`--model sage`): this project's first, looser adaptation of GMTRouter, kept to be
measured beside the paper's HGT model on the synthetic benchmark.

Response nodes start from their query, their model (an ID embedding, so the model vocabulary is fixed at
training) and the rating; heterogeneous SAGE layers carry that into sessions and users, and stated
favourite models link to users. A (user, query, model) triple is scored by an MLP over the three and
their element-wise products. Training: BPR on comparisons plus a pointwise logistic loss on every
rating, in batches of users, each user's sessions re-split at random into context and targets.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch_geometric.data import HeteroData
from torch_geometric.nn import HeteroConv, SAGEConv
from tqdm import tqdm

from searchrl.routing.gmtrouter.data import Session, UserLog, sessions_of
from searchrl.routing.gmtrouter.graph import LLMTable, TextTable, UserHistory
from searchrl.routing.gmtrouter.model import Grid, NetConfig

EDGE_TYPES = [
    ("query", "asks", "response"),
    ("model", "answers", "response"),
    ("response", "in", "session"),
    ("session", "holds", "response"),
    ("session", "of", "user"),
    ("user", "has", "session"),
    ("model", "preferred_by", "user"),
]
# Query and model features enter responses through `response_mlp` (their product needs the rating's
# sign); the layers carry responses into sessions and users and back.
CONV_EDGES = [et for et in EDGE_TYPES if et[0] not in ("query", "model") or et[2] == "user"]


def build_sage_graph(histories: Sequence[UserHistory], vocab: dict[str, int], queries: TextTable) -> HeteroData:
    """One graph over all the given users; user i of `histories` is user node i. Models outside `vocab`
    are skipped (the caller validates logs against the vocabulary first)."""
    q_text: list[str] = []
    q_row: dict[str, int] = {}
    resp_q, resp_m, resp_fb, resp_s = [], [], [], []
    sess_u: list[int] = []
    pref_m, pref_u = [], []
    for u, hist in enumerate(histories):
        for session in hist.sessions:
            s = len(sess_u)
            sess_u.append(u)
            for inter in session.interactions:
                if inter.model_used not in vocab:
                    continue
                if inter.query not in q_row:
                    q_row[inter.query] = len(q_text)
                    q_text.append(inter.query)
                resp_q.append(q_row[inter.query])
                resp_m.append(vocab[inter.model_used])
                resp_fb.append(inter.user_feedback)
                resp_s.append(s)
        for name in hist.preferred:
            if name in vocab:
                pref_m.append(vocab[name])
                pref_u.append(u)

    def edges(src: list[int], dst: list[int]) -> torch.Tensor:
        return torch.tensor([src, dst], dtype=torch.long).reshape(2, -1)

    n_resp = len(resp_q)
    data = HeteroData()
    data["user"].num_nodes = len(histories)
    data["session"].num_nodes = len(sess_u)
    data["query"].x = queries.tensor(q_text)
    data["model"].num_nodes = len(vocab)
    data["response"].num_nodes = n_resp
    data["response"].feedback = torch.tensor(resp_fb, dtype=torch.float32)
    resp = list(range(n_resp))
    data["query", "asks", "response"].edge_index = edges(resp_q, resp)
    data["model", "answers", "response"].edge_index = edges(resp_m, resp)
    data["response", "in", "session"].edge_index = edges(resp, resp_s)
    data["session", "holds", "response"].edge_index = edges(resp_s, resp)
    data["session", "of", "user"].edge_index = edges(list(range(len(sess_u))), sess_u)
    data["user", "has", "session"].edge_index = edges(sess_u, list(range(len(sess_u))))
    data["model", "preferred_by", "user"].edge_index = edges(pref_m, pref_u)
    return data


class SageNet(nn.Module):
    def __init__(self, config: NetConfig, personalised: bool = True) -> None:
        super().__init__()
        h = config.hidden
        self.config = config
        self.personalised = personalised
        self.vocab = {m: i for i, m in enumerate(config.models)}
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

    def user_states(self, histories: Sequence[UserHistory], texts: TextTable, llms: LLMTable) -> torch.Tensor | None:
        if not self.personalised:
            return None
        return self.states(build_sage_graph(histories, self.vocab, texts))

    def states(self, graph: HeteroData) -> torch.Tensor:
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

    def score(self, users: Grid, queries: Grid, llm_rows: torch.Tensor, llms: LLMTable) -> torch.Tensor:
        # The LLM table's first rows are the training vocabulary in order, the rows of `model_emb`.
        u = users.rows(self.config.hidden) if users.table is not None else None
        return self.score_ids(u, queries.rows(self.config.query_dim), llm_rows)

    def score_ids(self, users: torch.Tensor | None, queries: torch.Tensor, models: torch.Tensor) -> torch.Tensor:
        q = self.query_proj(queries)
        m = self.model_emb(models)
        u = users if (self.personalised and users is not None) else torch.zeros_like(q)
        return self.decoder(torch.cat([u, q, m, q * m, u * m, u * q * m], dim=1)).squeeze(1)


def preference_pairs(items: list[tuple[int, float]], min_gap: float) -> list[tuple[int, int]]:
    """(winner, loser) pairs among the (row, rating) items of one group (same user, session and query)."""
    pairs = []
    for a, (ra, fa) in enumerate(items):
        for rb, fb in items[a + 1 :]:
            if fa - fb > min_gap:
                pairs.append((ra, rb))
            elif fb - fa > min_gap:
                pairs.append((rb, ra))
    return pairs


def train_sage(
    users: list[UserLog],
    net_config: NetConfig,
    queries: TextTable,
    *,
    epochs: int,
    lr: float,
    weight_decay: float,
    seed: int,
    batch_users: int,
    pointwise_weight: float,
    min_gap: float,
    personalised: bool,
    progress: bool,
) -> SageNet:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    vocab = {m: i for i, m in enumerate(net_config.models)}
    sessions = [(u, ss) for u in users if len(ss := sessions_of(u, net_config.session_gap_minutes)) >= 2]
    if not sessions:
        raise ValueError("training needs users with at least two sessions (one as context, one as target)")
    queries.add([i.query for u in users for i in u.interactions])
    qmat = queries.matrix()
    net = SageNet(net_config, personalised=personalised)
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay)
    label = "personalised" if personalised else "non-personalised"
    bar = tqdm(range(epochs), desc=f"train sage {label}", unit="epoch", disable=not progress)
    for _ in bar:
        order = rng.permutation(len(sessions))
        losses = []
        for start in range(0, len(order), batch_users):
            batch = [sessions[i] for i in order[start : start + batch_users]]
            loss = _step_loss(net, batch, vocab, queries, qmat, pointwise_weight, min_gap, rng)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        bar.set_postfix(loss=f"{np.mean(losses):.3f}")
    net.eval()
    return net


def _step_loss(
    net: SageNet,
    batch: list[tuple[UserLog, list[Session]]],
    vocab: dict[str, int],
    queries: TextTable,
    qmat: torch.Tensor,
    pointwise_weight: float,
    min_gap: float,
    rng: np.random.Generator,
) -> torch.Tensor:
    histories: list[UserHistory] = []
    rows: list[tuple[int, str, int, float]] = []  # (user node, query, model, rating)
    pairs: list[tuple[int, int]] = []
    for user, ss in batch:
        order = rng.permutation(len(ss))
        k = int(rng.integers(1, len(ss)))
        u = len(histories)
        histories.append(UserHistory(user.user_id, [ss[i] for i in sorted(order[:k])], user.preferred_models))
        for i in order[k:]:
            groups: dict[str, list[tuple[int, float]]] = {}
            for inter in ss[i].interactions:
                groups.setdefault(inter.query, []).append((len(rows), inter.user_feedback))
                rows.append((u, inter.query, vocab[inter.model_used], inter.user_feedback))
            for items in groups.values():
                pairs.extend(preference_pairs(items, min_gap))
    q = qmat[queries.rows([r[1] for r in rows])]
    m = torch.tensor([r[2] for r in rows])
    y = torch.tensor([r[3] for r in rows], dtype=torch.float32)
    states = net.states(build_sage_graph(histories, vocab, queries)) if net.personalised else None
    u_rows = states[torch.tensor([r[0] for r in rows])] if states is not None else None
    s = net.score_ids(u_rows, q, m)
    loss = pointwise_weight * nn.functional.binary_cross_entropy_with_logits(s, y)
    if pairs:
        win, lose = torch.tensor(pairs).T
        loss = loss - nn.functional.logsigmoid(s[win] - s[lose]).mean()
    return loss
