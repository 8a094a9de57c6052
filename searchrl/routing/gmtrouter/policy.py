"""A trained GMTRouter as a scorer (for evaluation) and as the routing backend's policy.

The policy reads its users' histories once at start (by default the logs it was trained on, kept in
the checkpoint), computes every user's state in one pass, and then answers "which model for this
user and this question" with one encoder call per batch. A user it has no history for gets the
state of an empty history: the router's population-level choice. With the HGT model a pool model the
checkpoint was not trained on joins as a new LLM node, known by its description (or name).

This module imports torch only when a policy is built, so the router backend stays light without one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from searchrl.routing.gmtrouter.data import read_logs, sessions_of

if TYPE_CHECKING:
    import numpy as np
    import torch

    from searchrl.routing.gmtrouter.graph import TextTable, UserHistory
    from searchrl.routing.gmtrouter.model import RouterNet

log = logging.getLogger(__name__)


class GMTRouterPolicyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["gmtrouter"] = "gmtrouter"
    checkpoint: Path = Field(description="a directory written by `searchrl gmtrouter train`")
    history: Path | None = Field(None, description="users' interaction logs (JSONL); default: the checkpoint's")
    user: str | None = Field(None, description="user of queries naming none (`auto: q`, not `auto@u: q`)")
    descriptions: dict[str, str] = Field(
        default_factory=dict,
        description="text of pool models the checkpoint was not trained on (HGT embeds it; default: the name)",
    )


class PersonalRouter:
    """Scores every known LLM for (user history, query) pairs with one trained network."""

    def __init__(self, net: RouterNet, texts: TextTable) -> None:
        from searchrl.routing.gmtrouter.graph import LLMTable

        self.net = net
        self.texts = texts
        self.llms = LLMTable(texts, net.config.models, net.config.llm_texts)

    @property
    def models(self) -> list[str]:
        return self.llms.names

    @property
    def vocab(self) -> dict[str, int]:
        return self.llms.rows

    @classmethod
    def load(
        cls,
        checkpoint: str | Path,
        personalised: bool = True,
        encode: Callable[[list[str]], np.ndarray] | None = None,
        texts: TextTable | None = None,
    ) -> PersonalRouter:
        """`texts` shares one embedding table between routers; else `encode` (default: the checkpoint's
        encoder, loaded here) embeds queries and LLM texts."""
        from searchrl.routing.gmtrouter.checkpoint import CheckpointError, load_checkpoint
        from searchrl.routing.gmtrouter.graph import TextTable
        from searchrl.routing.gmtrouter.train import bundled_encoder

        net = load_checkpoint(checkpoint, personalised=personalised)
        if texts is not None:
            return cls(net, texts)
        if encode is None:
            encode, dim = bundled_encoder(net.config.encoder)
            if dim != net.config.query_dim:
                raise CheckpointError(
                    f"{checkpoint}: trained on {net.config.query_dim}-d text embeddings, {net.config.encoder} "
                    f"gives {dim}"
                )
        return cls(net, TextTable(encode, net.config.query_dim))

    def add_models(self, descriptions: Mapping[str, str | None]) -> None:
        """New LLM nodes, each known by its text (default: its name): HGT scores them untrained; SAGE cannot."""
        new = {m: d for m, d in descriptions.items() if m not in self.vocab}
        if not new:
            return
        if self.net.config.kind != "hgt":
            raise ValueError(
                f"models {sorted(new)} are not in the checkpoint's vocabulary {self.models}; a {self.net.config.kind} "
                "router knows models by ID: retrain with them (or train the default hgt model)"
            )
        for name, text in new.items():
            self.llms.add(name, text)

    def user_states(self, histories: Sequence[UserHistory]) -> torch.Tensor | None:
        import torch

        with torch.inference_mode():
            return self.net.user_states(histories, self.texts, self.llms)

    def scores(self, states: torch.Tensor | None, user_rows: Sequence[int], queries: Sequence[str]) -> np.ndarray:
        """(len(queries), len(models)) scores; row i is for user state `user_rows[i]` and `queries[i]`."""
        import numpy as np
        import torch

        from searchrl.routing.gmtrouter.model import Grid

        n, k = len(queries), len(self.models)
        if n == 0:
            return np.zeros((0, k), dtype=np.float32)
        distinct = list(dict.fromkeys(queries))
        where = {t: i for i, t in enumerate(distinct)}
        with torch.inference_mode():
            q = Grid(self.texts.tensor(distinct), torch.tensor([where[t] for t in queries]).repeat_interleave(k))
            u = Grid(states, torch.tensor(list(user_rows), dtype=torch.long).repeat_interleave(k))
            return self.net.score(u, q, torch.arange(k).repeat(n), self.llms).reshape(n, k).numpy()


class GMTRouterPolicy:
    """The routing backend's policy: `choose([(user, question), ...], allowed)` -> model names."""

    def __init__(self, router: PersonalRouter, histories: list[UserHistory], default_user: str | None) -> None:
        from searchrl.routing.gmtrouter.graph import UserHistory

        self.router = router
        self.default_user = default_user
        # The last node is a user with no history: the state every unknown user gets.
        self.rows = {h.user_id: i for i, h in enumerate(histories)}
        self.states = router.user_states([*histories, UserHistory("", [])])
        self.unknown_row = len(histories)

    @classmethod
    def from_config(cls, config: GMTRouterPolicyConfig, pool: Sequence[str]) -> GMTRouterPolicy:
        from searchrl.routing.gmtrouter.checkpoint import HISTORY_FILE
        from searchrl.routing.gmtrouter.graph import UserHistory

        router = PersonalRouter.load(config.checkpoint)
        path = config.history or config.checkpoint / HISTORY_FILE
        hgt = router.net.config.kind == "hgt"
        if hgt:
            new = [m for m in pool if m not in router.vocab]
            if new:
                log.info("gmtrouter: scoring pool models %s from their descriptions (not in training)", new)
            router.add_models({m: config.descriptions.get(m) for m in new})
        elif not set(pool) & set(router.models):
            raise ValueError(
                f"search.router.policy.checkpoint: {config.checkpoint} was trained on models {router.models}, "
                f"none of them in the pool {list(pool)}; name pool models as in the training logs"
            )
        gap = router.net.config.session_gap_minutes
        users = read_logs(path, models=None if hgt else router.models) if path.is_file() else []
        if hgt:
            router.add_models({m: config.descriptions.get(m) for u in users for m in u.models()})
        histories = [UserHistory(u.user_id, sessions_of(u, gap), u.preferred_models) for u in users]
        return cls(router, histories, config.user)

    def choose(self, items: Sequence[tuple[str | None, str]], allowed: Sequence[str]) -> list[str]:
        cols = [self.router.vocab[m] for m in allowed if m in self.router.vocab]
        if not cols:
            raise ValueError(f"the router knows none of the pool's models {list(allowed)}")
        rows = [self.rows.get(user or self.default_user or "", self.unknown_row) for user, _ in items]
        scores = self.router.scores(self.states, rows, [q for _, q in items])[:, cols]
        return [self.router.models[cols[int(j)]] for j in scores.argmax(axis=1)]
