"""Held-out evaluation of a personalised router against popularity and a non-personalised router.

A target is one question of one session that the user put to several models: its ratings say which
model the user preferred. Preference accuracy is the share of rated pairs (ratings more than
`min_gap` apart) that a method orders correctly (a tied score counts half); NDCG@k ranks the rated
models of a target by the method's score with the rating as gain. Both are given per user and overall
(accuracy over all pairs, NDCG over all targets).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from routing.gmtrouter.data import Session, UserLog, sessions_of
from routing.gmtrouter.graph import UserHistory
from routing.gmtrouter.model import HISTORY_FILE
from routing.gmtrouter.policy import PersonalRouter
from routing.gmtrouter.train import TrainConfig

METHODS = ("personalised", "non_personalised", "popularity")


@dataclass
class Target:
    user_row: int
    query: str
    ratings: dict[str, float]  # model -> rating


def ndcg(scores: dict[str, float], ratings: dict[str, float], k: int) -> float | None:
    ranked = sorted(ratings, key=lambda m: -scores[m])[:k]
    ideal = sorted(ratings.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    if idcg <= 0:
        return None
    return sum(ratings[m] / math.log2(i + 2) for i, m in enumerate(ranked)) / idcg


def pair_hits(scores: dict[str, float], ratings: dict[str, float], min_gap: float) -> tuple[float, int]:
    hits, n = 0.0, 0
    names = list(ratings)
    for a, ma in enumerate(names):
        for mb in names[a + 1 :]:
            diff = ratings[ma] - ratings[mb]
            if abs(diff) <= min_gap:
                continue
            n += 1
            d = scores[ma] - scores[mb]
            hits += 0.5 if d == 0 else float((d > 0) == (diff > 0))
    return hits, n


def targets_of(user_row: int, sessions: Sequence[Session], vocab: set[str]) -> list[Target]:
    out = []
    for session in sessions:
        by_query: dict[str, dict[str, float]] = {}
        for inter in session.interactions:
            if inter.model_used in vocab:
                by_query.setdefault(inter.query, {})[inter.model_used] = inter.user_feedback
        out.extend(Target(user_row, q, r) for q, r in by_query.items() if len(r) >= 2)
    return out


def evaluate(
    routers: dict[str, PersonalRouter],
    popularity: dict[str, list[float]],
    histories: list[UserHistory],
    targets: list[Target],
    k: int = 3,
    min_gap: float = 0.05,
) -> dict:
    """Metrics of the personalised and non-personalised routers and of popularity on `targets`, whose
    user rows index `histories` (the graph the user embeddings are computed from)."""
    per_method: dict[str, np.ndarray] = {}
    queries = [t.query for t in targets]
    rows = [t.user_row for t in targets]
    for name, router in routers.items():
        per_method[name] = router.scores(router.user_states(histories), rows, queries)
    models = next(iter(routers.values())).models
    pop = np.array([popularity.get(m, [0.0, 0.0])[0] for m in models], dtype=np.float32)
    per_method["popularity"] = np.tile(pop, (len(targets), 1))
    sums: dict[str, dict[str, dict[str, float]]] = {}  # user -> method -> running sums
    for i, t in enumerate(targets):
        user = histories[t.user_row].user_id
        for name, matrix in per_method.items():
            scores = dict(zip(models, matrix[i].tolist(), strict=True))
            acc = sums.setdefault(user, {}).setdefault(name, {"hits": 0.0, "pairs": 0, "ndcg": 0.0, "targets": 0})
            hits, n = pair_hits(scores, t.ratings, min_gap)
            acc["hits"] += hits
            acc["pairs"] += n
            g = ndcg(scores, t.ratings, k)
            if g is not None:
                acc["ndcg"] += g
                acc["targets"] += 1

    def summary(acc: dict[str, float]) -> dict[str, float | int | None]:
        return {
            "preference_accuracy": acc["hits"] / acc["pairs"] if acc["pairs"] else None,
            f"ndcg@{k}": acc["ndcg"] / acc["targets"] if acc["targets"] else None,
            "pairs": int(acc["pairs"]),
            "targets": int(acc["targets"]),
        }

    overall: dict[str, dict] = {}
    for name in per_method:
        total = {"hits": 0.0, "pairs": 0, "ndcg": 0.0, "targets": 0}
        for by_method in sums.values():
            for key in total:
                total[key] += by_method[name][key]
        overall[name] = summary(total)
    margins = {
        f"over_{base}": {
            metric: overall["personalised"][metric] - overall[base][metric]
            for metric in ("preference_accuracy", f"ndcg@{k}")
            if overall["personalised"][metric] is not None and overall[base][metric] is not None
        }
        for base in per_method
        if base != "personalised" and "personalised" in per_method
    }
    return {
        "k": k,
        "users": len(sums),
        "overall": overall,
        "margins": margins,
        "per_user": {u: {n: summary(a) for n, a in by_method.items()} for u, by_method in sums.items()},
    }


def load_routers(
    checkpoint: str | Path, encode: Callable[[list[str]], np.ndarray] | None = None
) -> dict[str, PersonalRouter]:
    personal = PersonalRouter.load(checkpoint, personalised=True, encode=encode)
    plain = PersonalRouter.load(checkpoint, personalised=False, queries=personal.queries)
    return {"personalised": personal, "non_personalised": plain}


def evaluate_logs(
    checkpoint: str | Path,
    users: list[UserLog],
    context_sessions: int = 3,
    k: int = 3,
    encode: Callable[[list[str]], np.ndarray] | None = None,
    progress: bool = True,
) -> dict:
    """Each user's first `context_sessions` sessions in `users` (after their history in the checkpoint,
    when the checkpoint has seen them) are context; the later sessions are the targets."""
    from routing.gmtrouter.data import read_logs

    routers = load_routers(checkpoint, encode)
    net_config = routers["personalised"].net.config
    gap = net_config.session_gap_minutes
    history_file = Path(checkpoint) / HISTORY_FILE
    seen = {u.user_id: u for u in read_logs(history_file)} if history_file.is_file() else {}
    vocab = set(net_config.models)
    histories: list[UserHistory] = []
    targets: list[Target] = []
    for user in tqdm(users, desc="evaluate", unit="user", disable=not progress):
        sessions = sessions_of(user, gap)
        past = sessions_of(seen[user.user_id], gap) if user.user_id in seen else []
        preferred = user.preferred_models or (seen[user.user_id].preferred_models if user.user_id in seen else [])
        histories.append(UserHistory(user.user_id, [*past, *sessions[:context_sessions]], preferred))
        targets.extend(targets_of(len(histories) - 1, sessions[context_sessions:], vocab))
    if not targets:
        raise ValueError(
            "no targets: no session after the context has one question rated for two or more models "
            "(lower --context-sessions, or log re-asked questions)"
        )
    report = evaluate(routers, net_config.popularity, histories, targets, k=k)
    report["context_sessions"] = context_sessions
    report["seen_users"] = sum(u.user_id in seen for u in users)
    return report


def heldout_experiment(
    seen_users: int,
    new_users: int,
    seed: int,
    cfg: TrainConfig,
    out: Path,
    train_fraction: float = 0.7,
    context_sessions: int = 3,
    encode: Callable[[list[str]], np.ndarray] | None = None,
    progress: bool = False,
) -> dict:
    """Synthetic users, trained on the earliest `train_fraction` of the seen users' sessions; scored on
    the seen users' later sessions and on new users (their first `context_sessions` as context)."""
    from routing.gmtrouter.data import split_sessions
    from routing.gmtrouter.synthetic import synthesize
    from routing.gmtrouter.train import train_checkpoint

    users = synthesize(seen_users + new_users, seed=seed)
    train, later = [], []
    for user in users[:seen_users]:
        early, late = split_sessions(user, train_fraction, cfg.session_gap_minutes)
        for sessions, into in ((early, train), (late, later)):
            inters = [i for s in sessions for i in s.interactions]
            if inters:
                into.append(user.model_copy(update={"interactions": inters}))
    train_checkpoint(train, out, cfg, encode=encode, progress=progress)
    return {
        "seen_users_later_sessions": evaluate_logs(out, later, 0, encode=encode, progress=progress),
        "new_users": evaluate_logs(out, users[seen_users:], context_sessions, encode=encode, progress=progress),
    }
