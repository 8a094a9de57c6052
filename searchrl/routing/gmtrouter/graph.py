"""GMTRouter's heterogeneous graph: user, session, query, LLM and response nodes with the original's edges.

As in the original (`src/util.py`), a session node is one turn of one model in a conversation: it is owned
by its user and includes its query, its response and the LLM that answered, and a later turn of the same
model in the same conversation points to that model's turn before it (the temporal `prev` edge). Users and
sessions start from nothing and a response from its rating, so a user never seen in training gets a state
from a few interactions; queries and LLMs carry text embeddings, so an LLM is known by its description.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import HeteroData
from tqdm import tqdm

from searchrl.routing.gmtrouter.data import Session

NODE_TYPES = ["user", "session", "query", "llm", "response"]
# The relations the original's graph is built from (HeteroEdges S2U, Q2S, L2S, R2S, S2S1), named as there.
EDGE_TYPES = [
    ("session", "owned by", "user"),
    ("query", "included by", "session"),
    ("llm", "response to", "session"),
    ("response", "included by", "session"),
    ("session", "prev", "session"),
]
TEMPORAL = ("session", "prev", "session")
# Node types that start from no information (user, session) or from one number (the rating): fed as one
# feature, not a width-wide constant vector, which gives a linear layer the same functions at 1/width the work.
SCALAR_NODES = ("user", "session", "response")


@dataclass
class UserHistory:
    """What the graph knows of one user: past sessions and stated favourite models."""

    user_id: str
    sessions: Sequence[Session]
    preferred: Sequence[str] = ()


class TextTable:
    """Text -> embedding row, embedding each distinct text once with the given batch encoder."""

    def __init__(self, encode: Callable[[list[str]], np.ndarray], dim: int) -> None:
        self._encode = encode
        self.dim = dim
        self._rows: dict[str, int] = {}
        self._vectors: list[np.ndarray] = []

    def add(self, texts: Sequence[str], progress: bool = False, chunk: int = 256) -> None:
        new = list(dict.fromkeys(t for t in texts if t not in self._rows))
        bar = tqdm(total=len(new), desc="embed texts", unit="text", disable=not progress or not new)
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
        """Every embedded text, row-aligned with `rows`."""
        return torch.from_numpy(np.stack(self._vectors)) if self._vectors else torch.zeros((0, self.dim))

    def tensor(self, texts: Sequence[str]) -> torch.Tensor:
        rows = self.rows(texts)
        if not rows:
            return torch.zeros((0, self.dim))
        return torch.from_numpy(np.stack([self._vectors[r] for r in rows]))


class LLMTable:
    """The LLMs a router can score: name -> row, each known by the embedding of its text (its description,
    else its name). Rows never move, so the first rows are the training vocabulary in its order."""

    def __init__(self, texts: TextTable, names: Sequence[str] = (), llm_texts: dict[str, str] | None = None) -> None:
        self.table = texts
        self.names: list[str] = []
        self.text_of: dict[str, str] = {}
        self.rows: dict[str, int] = {}
        self._features: torch.Tensor | None = None
        for name in names:
            self.add(name, (llm_texts or {}).get(name))

    def add(self, name: str, text: str | None = None) -> None:
        if name in self.rows:
            return
        self.rows[name] = len(self.names)
        self.names.append(name)
        self.text_of[name] = text or name
        self._features = None

    def features(self) -> torch.Tensor:
        if self._features is None:
            self._features = self.table.tensor([self.text_of[n] for n in self.names])
        return self._features


def build_graph(
    histories: Sequence[UserHistory],
    queries: TextTable,
    llm_rows: dict[str, int],
    llm_x: torch.Tensor,
    temporal: bool = True,
) -> HeteroData:
    """One graph over all the given users (user i of `histories` is user node i). LLM node j has features
    `llm_x[j]`; an interaction whose model is not in `llm_rows` is left out (callers add or refuse it)."""
    q_text: list[str] = []
    q_row: dict[str, int] = {}
    owner, s_query, s_llm, rating, prev_src, prev_dst = [], [], [], [], [], []
    for u, hist in enumerate(histories):
        for session in hist.sessions:
            last: dict[str, int] = {}
            for inter in session.interactions:
                if inter.model_used not in llm_rows:
                    continue
                s = len(owner)
                if inter.query not in q_row:
                    q_row[inter.query] = len(q_text)
                    q_text.append(inter.query)
                owner.append(u)
                s_query.append(q_row[inter.query])
                s_llm.append(llm_rows[inter.model_used])
                rating.append(inter.user_feedback)
                if temporal and inter.model_used in last:
                    prev_src.append(s)
                    prev_dst.append(last[inter.model_used])
                last[inter.model_used] = s

    def edges(src: list[int], dst: list[int]) -> torch.Tensor:
        return torch.tensor([src, dst], dtype=torch.long).reshape(2, -1)

    n = len(owner)
    sessions = list(range(n))
    data = HeteroData()
    data["user"].x = torch.zeros((len(histories), 1))
    data["session"].x = torch.zeros((n, 1))
    data["response"].x = torch.tensor(rating, dtype=torch.float32).reshape(n, 1)
    data["query"].x = queries.tensor(q_text)
    data["llm"].x = llm_x
    data["session", "owned by", "user"].edge_index = edges(sessions, owner)
    data["query", "included by", "session"].edge_index = edges(s_query, sessions)
    data["llm", "response to", "session"].edge_index = edges(s_llm, sessions)
    # One response per session node, so response i belongs to session i.
    data["response", "included by", "session"].edge_index = edges(sessions, sessions)
    data[TEMPORAL].edge_index = edges(prev_src, prev_dst)
    return data
