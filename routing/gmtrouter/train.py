"""Training from feedback: a pairwise (BPR) loss where one user's question was answered by several models,
plus a pointwise loss on every rating so that logs without such comparisons still teach.

Each epoch re-splits every user's sessions at random into context (the graph the user's embedding is
computed from) and targets (the ratings to predict), so the network learns to read preferences from
a handful of interactions and never sees a target's own rating in its input: that is what makes it
inductive for new users.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from routing.gmtrouter.data import Session, UserLog, check_models, sessions_of, write_logs
from routing.gmtrouter.graph import QueryTable, UserHistory, build_graph
from routing.gmtrouter.model import HISTORY_FILE, GMTRouterNet, NetConfig, save_checkpoint


@dataclass
class TrainConfig:
    hidden: int = 64
    layers: int = 2
    epochs: int = 60
    # Users per gradient step: each step is one graph over a batch of users.
    batch_users: int = 32
    lr: float = 5e-3
    weight_decay: float = 1e-5
    seed: int = 0
    session_gap_minutes: float = 30.0
    pointwise_weight: float = 0.5
    # Two ratings closer than this are a tie, not a preference.
    min_gap: float = 0.05
    # The graphs are small: on a shared CPU, one thread runs them ~10x faster than several fighting.
    threads: int = 1


@functools.lru_cache(maxsize=2)
def bundled_encoder(model: str = "all-MiniLM-L6-v2") -> tuple[Callable[[list[str]], np.ndarray], int]:
    from search_backend.encoder import Encoder

    enc = Encoder(model)
    return enc.encode_queries, enc.dimension


def popularity(users: list[UserLog], vocab: list[str]) -> dict[str, list[float]]:
    """Per model: [mean rating, count] over all interactions."""
    sums = dict.fromkeys(vocab, 0.0)
    counts = dict.fromkeys(vocab, 0)
    for user in users:
        for inter in user.interactions:
            if inter.model_used in sums:
                sums[inter.model_used] += inter.user_feedback
                counts[inter.model_used] += 1
    return {m: [sums[m] / counts[m] if counts[m] else 0.0, float(counts[m])] for m in vocab}


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


def train_net(
    users: list[UserLog],
    net_config: NetConfig,
    queries: QueryTable,
    cfg: TrainConfig,
    personalised: bool = True,
    progress: bool = True,
) -> GMTRouterNet:
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        return _train(users, net_config, queries, cfg, personalised, progress)
    finally:
        torch.set_num_threads(threads)


def _train(
    users: list[UserLog],
    net_config: NetConfig,
    queries: QueryTable,
    cfg: TrainConfig,
    personalised: bool,
    progress: bool,
) -> GMTRouterNet:
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    vocab = {m: i for i, m in enumerate(net_config.models)}
    sessions = [(u, ss) for u in users if len(ss := sessions_of(u, cfg.session_gap_minutes)) >= 2]
    if not sessions:
        raise ValueError("training needs users with at least two sessions (one as context, one as target)")
    queries.add([i.query for u in users for i in u.interactions])
    qmat = queries.matrix()
    net = GMTRouterNet(net_config, personalised=personalised)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    label = "personalised" if personalised else "non-personalised"
    bar = tqdm(range(cfg.epochs), desc=f"train {label}", unit="epoch", disable=not progress)
    for _ in bar:
        order = rng.permutation(len(sessions))
        losses = []
        for start in range(0, len(order), cfg.batch_users):
            batch = [sessions[i] for i in order[start : start + cfg.batch_users]]
            loss = _step_loss(net, batch, vocab, queries, qmat, cfg, rng)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        bar.set_postfix(loss=f"{np.mean(losses):.3f}")
    net.eval()
    return net


def _step_loss(
    net: GMTRouterNet,
    batch: list[tuple[UserLog, list[Session]]],
    vocab: dict[str, int],
    queries: QueryTable,
    qmat: torch.Tensor,
    cfg: TrainConfig,
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
                pairs.extend(preference_pairs(items, cfg.min_gap))
    q = qmat[queries.rows([r[1] for r in rows])]
    m = torch.tensor([r[2] for r in rows])
    y = torch.tensor([r[3] for r in rows], dtype=torch.float32)
    states = net.user_states(build_graph(histories, vocab, queries)) if net.personalised else None
    u_rows = states[torch.tensor([r[0] for r in rows])] if states is not None else None
    s = net.score(u_rows, q, m)
    loss = cfg.pointwise_weight * nn.functional.binary_cross_entropy_with_logits(s, y)
    if pairs:
        win, lose = torch.tensor(pairs).T
        loss = loss - nn.functional.logsigmoid(s[win] - s[lose]).mean()
    return loss


def train_checkpoint(
    users: list[UserLog],
    out: Path,
    cfg: TrainConfig,
    models: list[str] | None = None,
    encoder: str = "all-MiniLM-L6-v2",
    encode: Callable[[list[str]], np.ndarray] | None = None,
    progress: bool = True,
) -> NetConfig:
    """Train the personalised router and its non-personalised twin on the same logs; write both, the
    config and the logs themselves (the policy's default user histories) to `out`."""
    vocab = sorted(models or {m for u in users for m in u.models()})
    for user in users:
        check_models(user, set(vocab), f"user {user.user_id}")
    if encode is None:
        encode, dim = bundled_encoder(encoder)
    else:
        dim = int(encode(["probe"]).shape[1])
    queries = QueryTable(encode, dim)
    queries.add(sorted({i.query for u in users for i in u.interactions}), progress=progress)
    net_config = NetConfig(
        models=vocab,
        query_dim=dim,
        encoder=encoder,
        hidden=cfg.hidden,
        layers=cfg.layers,
        session_gap_minutes=cfg.session_gap_minutes,
        popularity=popularity(users, vocab),
    )
    nets = {p: train_net(users, net_config, queries, cfg, personalised=p, progress=progress) for p in (True, False)}
    save_checkpoint(out, net_config, nets)
    write_logs(users, out / HISTORY_FILE)
    return net_config
