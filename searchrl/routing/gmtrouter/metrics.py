"""The original's metrics (`src/train.py`, `evaluate_jsonl` on pairs): over rated pairs (one user's question
put to two models, the two ratings differing), accuracy is the share whose better-rated model scores
higher, ROC-AUC ranks the score differences against "the first of the pair is better", and per-user AUC
is that AUC within each user. Pairs keep the order of the log, as the original keeps the file's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations

import numpy as np
from sklearn.metrics import roc_auc_score


def rated_pairs(ratings: Sequence[float]) -> list[tuple[int, int, int]]:
    """(a, b, label) for every 2-combination of the items in order, exact ties skipped; label 1 when a won."""
    pairs = combinations(range(len(ratings)), 2)
    return [(a, b, int(ratings[a] > ratings[b])) for a, b in pairs if ratings[a] != ratings[b]]


def auc(labels: Sequence[int], scores: Sequence[float]) -> float | None:
    """ROC-AUC, or None where it is undefined (one class only; the original writes 0.0 there)."""
    return float(roc_auc_score(labels, scores)) if len(set(labels)) > 1 else None


def pair_metrics(users: Sequence[str], diffs: Sequence[float], labels: Sequence[int], per_user: bool = True) -> dict:
    """accuracy, auc and the mean per-user AUC of aligned (user, s_a - s_b, label) pairs, and each user's
    accuracy, AUC and pair count; a score tie counts as wrong, as in the original."""
    d = np.asarray(diffs, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    right = ((d > 0) & (y == 1)) | ((d < 0) & (y == 0))
    out = {"accuracy": float(right.mean()) if len(d) else None, "auc": auc(y.tolist(), d.tolist()), "pairs": len(d)}
    if not per_user:
        return out
    by_user: dict[str, list[int]] = {}
    for i, u in enumerate(users):
        by_user.setdefault(u, []).append(i)
    mine = {
        u: {"accuracy": float(right[rows].mean()), "auc": auc(y[rows].tolist(), d[rows].tolist()), "pairs": len(rows)}
        for u, rows in by_user.items()
    }
    defined = [m["auc"] for m in mine.values() if m["auc"] is not None]
    return out | {"per_user_auc": float(np.mean(defined)) if defined else None, "per_user": mine}


def ndcg(scores: dict[str, float], ratings: dict[str, float], k: int) -> float | None:
    """NDCG@k of the rated models ranked by score, the rating as gain (ours; the original reports none)."""
    ranked = sorted(ratings, key=lambda m: -scores[m])[:k]
    ideal = sorted(ratings.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    if idcg <= 0:
        return None
    return sum(ratings[m] / math.log2(i + 2) for i, m in enumerate(ranked)) / idcg
