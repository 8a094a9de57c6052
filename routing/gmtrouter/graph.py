"""The heterogeneous interaction graph: users, sessions, queries, models and responses.

A response node is one rated answer: its query and its model point at it, it sits in a session, and
the session belongs to a user; a user's stated favourites link models to the user. Users carry no ID
feature, so a user never seen in training gets an embedding from their own few interactions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import HeteroData
from tqdm import tqdm

from routing.gmtrouter.data import Session

EDGE_TYPES = [
    ("query", "asks", "response"),
    ("model", "answers", "response"),
    ("response", "in", "session"),
    ("session", "holds", "response"),
    ("session", "of", "user"),
    ("user", "has", "session"),
    ("model", "preferred_by", "user"),
]


@dataclass
class UserHistory:
    """What the graph knows of one user: past sessions and stated favourite models."""

    user_id: str
    sessions: Sequence[Session]
    preferred: Sequence[str] = ()


class QueryTable:
    """Query text -> embedding row, embedding each distinct text once with the given batch encoder."""

    def __init__(self, encode: Callable[[list[str]], np.ndarray], dim: int) -> None:
        self._encode = encode
        self.dim = dim
        self._rows: dict[str, int] = {}
        self._vectors: list[np.ndarray] = []

    def add(self, texts: Sequence[str], progress: bool = False, chunk: int = 256) -> None:
        new = list(dict.fromkeys(t for t in texts if t not in self._rows))
        bar = tqdm(total=len(new), desc="embed queries", unit="query", disable=not progress or not new)
        for start in range(0, len(new), chunk):
            part = new[start : start + chunk]
            for t, v in zip(part, self._encode(part), strict=True):
                self._rows[t] = len(self._rows)
                self._vectors.append(np.asarray(v, dtype=np.float32))
            bar.update(len(part))
        bar.close()

    def rows(self, texts: Sequence[str]) -> list[int]:
        self.add(texts)
        return [self._rows[t] for t in texts]

    def matrix(self) -> torch.Tensor:
        """Every embedded query, row-aligned with `rows`."""
        return torch.from_numpy(np.stack(self._vectors)) if self._vectors else torch.zeros((0, self.dim))

    def tensor(self, texts: Sequence[str]) -> torch.Tensor:
        rows = self.rows(texts)
        if not rows:
            return torch.zeros((0, self.dim))
        return torch.from_numpy(np.stack([self._vectors[r] for r in rows]))


def build_graph(histories: Sequence[UserHistory], vocab: dict[str, int], queries: QueryTable) -> HeteroData:
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
