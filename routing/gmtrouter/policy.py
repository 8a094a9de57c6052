"""A trained GMTRouter as a scorer (for evaluation) and as the routing backend's policy.

The policy reads its users' histories once at start (by default the logs it was trained on, kept in
the checkpoint), computes every user's embedding in one pass, and then answers "which model for this
user and this question" with one encoder call per batch. A user it has no history for gets the
embedding of an empty history: the router's population-level choice.

This module imports torch only when a policy is built, so the router backend stays light without one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    import numpy as np
    import torch

    from routing.gmtrouter.graph import QueryTable, UserHistory
    from routing.gmtrouter.model import GMTRouterNet


class GMTRouterPolicyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["gmtrouter"] = "gmtrouter"
    checkpoint: Path = Field(description="a directory written by `python -m routing.gmtrouter train`")
    history: Path | None = Field(None, description="users' interaction logs (JSONL); default: the checkpoint's")
    user: str | None = Field(None, description="user of queries naming none (`auto: q`, not `auto@u: q`)")


class PersonalRouter:
    """Scores every vocabulary model for (user history, query) pairs with one trained network."""

    def __init__(self, net: GMTRouterNet, queries: QueryTable) -> None:
        self.net = net
        self.models = list(net.config.models)
        self.vocab = {m: i for i, m in enumerate(self.models)}
        self.queries = queries

    @classmethod
    def load(
        cls,
        checkpoint: str | Path,
        personalised: bool = True,
        encode: Callable[[list[str]], np.ndarray] | None = None,
        queries: QueryTable | None = None,
    ) -> PersonalRouter:
        """`queries` shares one embedding table between routers; else `encode` (default: the checkpoint's
        encoder, loaded here) embeds queries."""
        from routing.gmtrouter.graph import QueryTable
        from routing.gmtrouter.model import CheckpointError, load_checkpoint
        from routing.gmtrouter.train import bundled_encoder

        net = load_checkpoint(checkpoint, personalised=personalised)
        if queries is not None:
            return cls(net, queries)
        if encode is None:
            encode, dim = bundled_encoder(net.config.encoder)
            if dim != net.config.query_dim:
                raise CheckpointError(
                    f"{checkpoint}: trained on {net.config.query_dim}-d query embeddings, {net.config.encoder} "
                    f"gives {dim}"
                )
        return cls(net, QueryTable(encode, net.config.query_dim))

    def user_states(self, histories: Sequence[UserHistory]) -> torch.Tensor | None:
        import torch

        from routing.gmtrouter.graph import build_graph

        if not self.net.personalised:
            return None
        with torch.inference_mode():
            return self.net.user_states(build_graph(histories, self.vocab, self.queries))

    def scores(self, states: torch.Tensor | None, user_rows: Sequence[int], queries: Sequence[str]) -> np.ndarray:
        """(len(queries), len(models)) scores; row i is for user state `user_rows[i]` and `queries[i]`."""
        import torch

        n, k = len(queries), len(self.models)
        if n == 0:
            import numpy as np

            return np.zeros((0, k), dtype=np.float32)
        with torch.inference_mode():
            q = self.queries.tensor(list(queries)).repeat_interleave(k, dim=0)
            m = torch.arange(k).repeat(n)
            u = states[torch.tensor(list(user_rows))].repeat_interleave(k, dim=0) if states is not None else None
            return self.net.score(u, q, m).reshape(n, k).numpy()


class GMTRouterPolicy:
    """The routing backend's policy: `choose([(user, question), ...], allowed)` -> model names."""

    def __init__(self, router: PersonalRouter, histories: list[UserHistory], default_user: str | None) -> None:
        from routing.gmtrouter.graph import UserHistory

        self.router = router
        self.default_user = default_user
        # The last node is a user with no history: the state every unknown user gets.
        self.rows = {h.user_id: i for i, h in enumerate(histories)}
        self.states = router.user_states([*histories, UserHistory("", [])])
        self.unknown_row = len(histories)

    @classmethod
    def from_config(cls, config: GMTRouterPolicyConfig, pool: Sequence[str]) -> GMTRouterPolicy:
        from routing.gmtrouter.data import read_logs, sessions_of
        from routing.gmtrouter.graph import UserHistory
        from routing.gmtrouter.model import HISTORY_FILE

        router = PersonalRouter.load(config.checkpoint)
        if not set(pool) & set(router.models):
            raise ValueError(
                f"search.router.policy.checkpoint: {config.checkpoint} was trained on models {router.models}, "
                f"none of them in the pool {list(pool)}; name pool models as in the training logs"
            )
        path = config.history or config.checkpoint / HISTORY_FILE
        gap = router.net.config.session_gap_minutes
        users = read_logs(path, models=router.models) if path.is_file() else []
        histories = [UserHistory(u.user_id, sessions_of(u, gap), u.preferred_models) for u in users]
        return cls(router, histories, config.user)

    def choose(self, items: Sequence[tuple[str | None, str]], allowed: Sequence[str]) -> list[str]:
        cols = [self.router.vocab[m] for m in allowed if m in self.router.vocab]
        if not cols:
            raise ValueError(f"the router knows none of the pool's models {list(allowed)}")
        rows = [self.rows.get(user or self.default_user or "", self.unknown_row) for user, _ in items]
        scores = self.router.scores(self.states, rows, [q for _, q in items])[:, cols]
        return [self.router.models[cols[int(j)]] for j in scores.argmax(axis=1)]
