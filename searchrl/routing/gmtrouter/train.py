"""Training the router. The default is the paper's recipe (original: `src/train.py`): one full-graph step per
epoch, the pairwise softplus loss on rated pairs, and the weights of the epoch with the best validation
AUC kept. `model="sage"` trains the SAGE baseline instead (`sage.py`).

Each epoch every user's sessions are split at random into context (the graph the user's state comes
from) and targets (the rated pairs to predict), so a target's rating is never in the graph and the
network learns to read a user from a handful of sessions: what makes it work for new users.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from searchrl.routing.gmtrouter.checkpoint import HISTORY_FILE, save_checkpoint
from searchrl.routing.gmtrouter.data import Session, UserLog, check_models, sessions_of, write_logs
from searchrl.routing.gmtrouter.graph import LLMTable, TextTable, UserHistory
from searchrl.routing.gmtrouter.metrics import pair_metrics, rated_pairs
from searchrl.routing.gmtrouter.model import KINDS, GMTRouterNet, Grid, NetConfig, RouterNet
from searchrl.routing.gmtrouter.sage import train_sage
from searchrl.search.encode.encoder import Encoder

# Per model: what a setting left unset means. HGT's are the original's (sample.yaml, train.py) but for the
# width, which the original ties to its text encoder's (768) and which costs 9x a step on a CPU at 384.
DEFAULTS: dict[str, dict[str, float | int]] = {
    "hgt": {"hidden": 128, "epochs": 350, "lr": 5e-4, "weight_decay": 0.0},
    "sage": {"hidden": 64, "layers": 2, "epochs": 60, "lr": 5e-3, "weight_decay": 1e-5},
}


@dataclass
class TrainConfig:
    model: str = "hgt"
    hidden: int | None = None
    # HGT: 3 with the temporal edges, 2 without, as the original's `multi_turn` sets it.
    layers: int | None = None
    epochs: int | None = None
    lr: float | None = None
    weight_decay: float | None = None
    seed: int = 0
    session_gap_minutes: float = 30.0
    # HGT, the original's names: session -> previous-session edges (`multi_turn`), rated pairs per step
    # (`prediction_count`), validation every `eval_every` epochs, the metric that picks the epoch (`objective`).
    temporal: bool = True
    prediction_count: int = 256
    eval_every: int = 5
    select_by: str = "auc"
    # Without validation logs: each user's latest sessions (this share, at least one) of users with three or more.
    valid_fraction: float = 0.1
    # SAGE: users per gradient step, the pointwise loss's weight, ratings closer than min_gap are a tie.
    batch_users: int = 32
    pointwise_weight: float = 0.5
    min_gap: float = 0.05
    # The graphs are small: on a shared CPU, one thread runs them faster than several fighting.
    threads: int = 1

    def resolved(self) -> TrainConfig:
        if self.model not in KINDS:
            raise ValueError(f"model: {self.model!r}; fix: one of {list(KINDS)}")
        if self.select_by not in ("auc", "accuracy"):
            raise ValueError(f"select_by: {self.select_by!r}; fix: auc or accuracy")
        unset = {f.name: DEFAULTS[self.model].get(f.name) for f in fields(self) if getattr(self, f.name) is None}
        if self.model == "hgt" and self.layers is None:
            unset["layers"] = 3 if self.temporal else 2
        return replace(self, **unset)


@functools.lru_cache(maxsize=2)
def bundled_encoder(model: str = "all-MiniLM-L6-v2") -> tuple[Callable[[list[str]], np.ndarray], int]:

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


def pairwise_loss(s_a: torch.Tensor, s_b: torch.Tensor, a_won: torch.Tensor) -> torch.Tensor:
    """The original's objective: mean softplus(-y (s_a - s_b)), y = +1 where a was rated higher, else -1."""
    y = 2.0 * a_won.to(s_a.dtype) - 1.0
    return nn.functional.softplus(-y * (s_a - s_b)).mean()


@dataclass
class Pairs:
    """Rated pairs to score: user row, query text, the two models and whether the first won."""

    user: list[int]
    query: list[str]
    a: list[str]
    b: list[str]
    a_won: list[int]

    @classmethod
    def empty(cls) -> Pairs:
        return cls([], [], [], [], [])

    def extend(self, row: int, sessions: Sequence[Session], known: set[str]) -> None:
        """Every rated pair of one question put to several models within one session, in log order."""
        for session in sessions:
            groups: dict[str, list[tuple[str, float]]] = {}
            for inter in session.interactions:
                if inter.model_used in known:
                    groups.setdefault(inter.query, []).append((inter.model_used, inter.user_feedback))
            for query, rated in groups.items():
                for a, b, won in rated_pairs([r for _, r in rated]):
                    self.user.append(row)
                    self.query.append(query)
                    self.a.append(rated[a][0])
                    self.b.append(rated[b][0])
                    self.a_won.append(won)

    def take(self, rows: Sequence[int]) -> Pairs:
        return Pairs(*([getattr(self, f.name)[i] for i in rows] for f in fields(self)))

    def __len__(self) -> int:
        return len(self.user)


def pair_scores(
    net: RouterNet, states: torch.Tensor | None, pairs: Pairs, texts: TextTable, llms: LLMTable
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores of each pair's first and second model, in one pass (each user and query projected once)."""
    distinct = list(dict.fromkeys(pairs.query))
    where = {t: i for i, t in enumerate(distinct)}
    q_idx = torch.tensor([where[t] for t in pairs.query], dtype=torch.long)
    u_idx = torch.tensor(pairs.user, dtype=torch.long)
    models = torch.tensor([llms.rows[m] for m in [*pairs.a, *pairs.b]], dtype=torch.long)
    users, queries = Grid(states, torch.cat([u_idx, u_idx])), Grid(texts.tensor(distinct), torch.cat([q_idx, q_idx]))
    s = net.score(users, queries, models, llms)
    return s[: len(pairs)], s[len(pairs) :]


def split_validation(users: list[UserLog], fraction: float, gap: float) -> tuple[list[UserLog], list[UserLog]]:
    """Each user's latest sessions (`fraction` of them, at least one) held out, for users with 3+ sessions."""
    train, valid = [], []
    for user in users:
        sessions = sessions_of(user, gap)
        n = max(1, math.floor(fraction * len(sessions))) if len(sessions) >= 3 and fraction > 0 else 0
        keep = [i for s in sessions[: len(sessions) - n] for i in s.interactions]
        held = [i for s in sessions[len(sessions) - n :] for i in s.interactions] if n else []
        train.append(user.model_copy(update={"interactions": keep}))
        if held:
            valid.append(user.model_copy(update={"interactions": held}))
    return train, valid


def train_hgt(
    users: list[UserLog],
    valid: list[UserLog],
    net_config: NetConfig,
    texts: TextTable,
    llms: LLMTable,
    cfg: TrainConfig,
    personalised: bool = True,
    progress: bool = True,
) -> tuple[GMTRouterNet, dict]:
    """The paper's loop; returns the network at the epoch of best validation `cfg.select_by` and the record
    of that choice (empty when there is nothing to validate on: then the last epoch's)."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    gap = net_config.session_gap_minutes
    known = set(llms.rows)
    sessions = [(u, ss) for u in users if len(ss := sessions_of(u, gap)) >= 2]
    if not sessions:
        raise ValueError("training needs users with at least two sessions (one as context, one as target)")
    texts.add([i.query for u in [*users, *valid] for i in u.interactions])

    # Validation: every training user's whole history is context; the held-out sessions are the targets.
    rows = {u.user_id: i for i, u in enumerate(users)}
    v_hist = [UserHistory(u.user_id, sessions_of(u, gap)) for u in users] + [UserHistory("", [])]
    v_pairs = Pairs.empty()
    for user in valid:
        v_pairs.extend(rows.get(user.user_id, len(users)), sessions_of(user, gap), known)
    v_ids = [v_hist[r].user_id or "(new)" for r in v_pairs.user]

    net = GMTRouterNet(net_config, personalised=personalised)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay or 0.0)
    best: tuple[float, int, dict[str, torch.Tensor]] | None = None
    evaluated: list[list[float]] = []
    label = "personalised" if personalised else "non-personalised"
    bar = tqdm(range(1, int(cfg.epochs or 0) + 1), desc=f"train hgt {label}", unit="epoch", disable=not progress)
    for epoch in bar:
        net.train()
        histories: list[UserHistory] = []
        targets = Pairs.empty()
        for user, ss in sessions:
            order = rng.permutation(len(ss))
            k = int(rng.integers(1, len(ss)))
            histories.append(UserHistory(user.user_id, [ss[i] for i in sorted(order[:k])]))
            targets.extend(len(histories) - 1, [ss[i] for i in order[k:]], known)
        if not len(targets):
            continue
        if len(targets) > cfg.prediction_count:
            targets = targets.take(sorted(rng.choice(len(targets), cfg.prediction_count, replace=False)))
        states = net.user_states(histories, texts, llms)
        s_a, s_b = pair_scores(net, states, targets, texts, llms)
        loss = pairwise_loss(s_a, s_b, torch.tensor(targets.a_won))
        opt.zero_grad()
        loss.backward()
        opt.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if len(v_pairs) and (epoch % cfg.eval_every == 0 or epoch == cfg.epochs):
            value = validate(net, v_hist, v_pairs, v_ids, texts, llms)[cfg.select_by]
            if value is not None:
                evaluated.append([epoch, round(value, 6)])
                if best is None or value > best[0]:
                    best = (value, epoch, {k: v.detach().clone() for k, v in net.state_dict().items()})
    selection: dict = {}
    if best is not None:
        net.load_state_dict(best[2])
        selection = {"metric": f"validation {cfg.select_by}", "epoch": best[1], "value": best[0]}
        selection |= {"pairs": len(v_pairs), "evaluated": evaluated}
    net.eval()
    return net, selection


def validate(
    net: RouterNet, histories: list[UserHistory], pairs: Pairs, ids: list[str], texts: TextTable, llms: LLMTable
) -> dict:
    was_training = net.training  # type: ignore[attr-defined]
    net.eval()  # type: ignore[attr-defined]
    with torch.no_grad():
        s_a, s_b = pair_scores(net, net.user_states(histories, texts, llms), pairs, texts, llms)
    net.train(was_training)  # type: ignore[attr-defined]
    return pair_metrics(ids, (s_a - s_b).tolist(), pairs.a_won, per_user=False)


def train_checkpoint(
    users: list[UserLog],
    out: Path,
    cfg: TrainConfig,
    valid: list[UserLog] | None = None,
    models: list[str] | None = None,
    llm_texts: dict[str, str] | None = None,
    encoder: str = "all-MiniLM-L6-v2",
    encode: Callable[[list[str]], np.ndarray] | None = None,
    progress: bool = True,
) -> NetConfig:
    """Train the personalised router and its non-personalised twin; write both, the config and the logs
    (the policy's default user histories) to `out`. Without `valid`, HGT holds out each user's latest
    sessions to pick its epoch (SAGE trains on everything and keeps its last epoch)."""
    cfg = cfg.resolved()
    vocab = list(models) if models else sorted({m for u in [*users, *(valid or [])] for m in u.models()})
    for user in [*users, *(valid or [])]:
        check_models(user, set(vocab), f"user {user.user_id}")
    if encode is None:
        encode, dim = bundled_encoder(encoder)
    else:
        dim = int(encode(["probe"]).shape[1])
    texts = TextTable(encode, dim)
    texts.add(sorted({i.query for u in users for i in u.interactions}), progress=progress)
    net_config = NetConfig(
        models=vocab,
        query_dim=dim,
        kind=cfg.model,
        encoder=encoder,
        llm_texts={m: (llm_texts or {}).get(m) or m for m in vocab},
        hidden=int(cfg.hidden or 0),
        layers=int(cfg.layers or 0),
        temporal=cfg.temporal,
        session_gap_minutes=cfg.session_gap_minutes,
        popularity=popularity(users, vocab),
    )
    llms = LLMTable(texts, vocab, net_config.llm_texts)
    nets: dict[bool, RouterNet] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        if cfg.model == "hgt":
            fit, held = (
                (users, valid)
                if valid is not None
                else split_validation(users, cfg.valid_fraction, cfg.session_gap_minutes)
            )
            for p in (True, False):
                nets[p], selection = train_hgt(fit, held, net_config, texts, llms, cfg, p, progress)
                net_config.selection["personalised" if p else "non_personalised"] = selection
        else:
            for p in (True, False):
                nets[p] = train_sage(
                    users,
                    net_config,
                    texts,
                    epochs=int(cfg.epochs or 0),
                    lr=float(cfg.lr or 0.0),
                    weight_decay=float(cfg.weight_decay or 0.0),
                    seed=cfg.seed,
                    batch_users=cfg.batch_users,
                    pointwise_weight=cfg.pointwise_weight,
                    min_gap=cfg.min_gap,
                    personalised=p,
                    progress=progress,
                )
    finally:
        torch.set_num_threads(threads)
    save_checkpoint(out, net_config, nets)
    write_logs(users, out / HISTORY_FILE)
    return net_config
