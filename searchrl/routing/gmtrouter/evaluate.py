"""Held-out evaluation of a personalised router against popularity and a non-personalised router.

A target is one question of one session that the user put to several models; its ratings give rated
pairs (all 2-combinations in log order, exact ties skipped). On those pairs each method gets the
original's metrics (accuracy, ROC-AUC of score differences, mean per-user AUC; `metrics.py`), and on
each target NDCG@k of the rated models ranked by score. Per user and overall.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from searchrl.routing.gmtrouter.checkpoint import HISTORY_FILE
from searchrl.routing.gmtrouter.data import Session, UserLog, sessions_of
from searchrl.routing.gmtrouter.graph import UserHistory
from searchrl.routing.gmtrouter.metrics import ndcg, pair_metrics, rated_pairs
from searchrl.routing.gmtrouter.policy import PersonalRouter
from searchrl.routing.gmtrouter.synthetic import synthesize
from searchrl.routing.gmtrouter.train import TrainConfig

METHODS = ("personalised", "non_personalised", "popularity")
PAIR_METRICS = ("accuracy", "auc", "per_user_auc")


@dataclass
class Target:
    user_row: int
    query: str
    ratings: dict[str, float]  # model -> rating, in log order


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
) -> dict:
    """Metrics of the personalised and non-personalised routers and of popularity on `targets`, whose
    user rows index `histories` (the graph the user states are computed from)."""
    per_method: dict[str, np.ndarray] = {}
    queries = [t.query for t in targets]
    rows = [t.user_row for t in targets]
    for name, router in routers.items():
        per_method[name] = router.scores(router.user_states(histories), rows, queries)
    models = next(iter(routers.values())).models
    pop = np.array([popularity.get(m, [0.0, 0.0])[0] for m in models], dtype=np.float32)
    per_method["popularity"] = np.tile(pop, (len(targets), 1))
    col = {m: j for j, m in enumerate(models)}
    users = [histories[t.user_row].user_id for t in targets]
    overall: dict[str, dict] = {}
    per_user: dict[str, dict[str, dict]] = {u: {} for u in users}
    for name, matrix in per_method.items():
        ids, diffs, labels = [], [], []
        gains: dict[str, list[float]] = {u: [] for u in users}
        for i, t in enumerate(targets):
            names = list(t.ratings)
            scores = {m: float(matrix[i, col[m]]) for m in names}
            for a, b, won in rated_pairs([t.ratings[m] for m in names]):
                ids.append(users[i])
                diffs.append(scores[names[a]] - scores[names[b]])
                labels.append(won)
            g = ndcg(scores, t.ratings, k)
            if g is not None:
                gains[users[i]].append(g)
        m = pair_metrics(ids, diffs, labels)
        every = [g for gs in gains.values() for g in gs]
        overall[name] = {key: m[key] for key in PAIR_METRICS} | {
            f"ndcg@{k}": float(np.mean(every)) if every else None,
            "pairs": m["pairs"],
            "targets": len(every),
        }
        for u in per_user:
            pairs = m["per_user"].get(u, {"accuracy": None, "auc": None, "pairs": 0})
            per_user[u][name] = pairs | {f"ndcg@{k}": float(np.mean(gains[u])) if gains[u] else None}
    margins = {
        f"over_{base}": {
            metric: overall["personalised"][metric] - overall[base][metric]
            for metric in (*PAIR_METRICS, f"ndcg@{k}")
            if overall["personalised"][metric] is not None and overall[base][metric] is not None
        }
        for base in per_method
        if base != "personalised" and "personalised" in per_method
    }
    return {"k": k, "users": len(per_user), "overall": overall, "margins": margins, "per_user": per_user}


def load_routers(
    checkpoint: str | Path, encode: Callable[[list[str]], np.ndarray] | None = None
) -> dict[str, PersonalRouter]:
    personal = PersonalRouter.load(checkpoint, personalised=True, encode=encode)
    plain = PersonalRouter.load(checkpoint, personalised=False, texts=personal.texts)
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
    from searchrl.routing.gmtrouter.data import read_logs

    routers = load_routers(checkpoint, encode)
    net_config = routers["personalised"].net.config
    if net_config.kind == "hgt":
        # Models the router was not trained on are scored from their names, as new LLM nodes.
        for router in routers.values():
            router.add_models({m: None for u in users for m in sorted(u.models())})
    gap = net_config.session_gap_minutes
    history_file = Path(checkpoint) / HISTORY_FILE
    seen = {u.user_id: u for u in read_logs(history_file)} if history_file.is_file() else {}
    vocab = set(routers["personalised"].models)
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
    from searchrl.routing.gmtrouter.data import split_sessions
    from searchrl.routing.gmtrouter.train import train_checkpoint

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
