"""GMTRouter's processed dataset format (the original's `src/util.py`, `parse_jsonl_groups` and
`build_nodes_from_groups`), read into this project's user logs so that users with that data can train.

One JSON object a line: `question_id`, `turn`, `judge` (the user), `model`, `model_emb`, and
`conversation`, a list of turns each with `query`, `query_emb`, `response` and `rating`. Consecutive lines
sharing (question_id, turn, judge) are one group: the same conversation held with two or more models,
the same number of turns each. As there, each group is one session of its judge, turn j of every model
is a comparison, ratings are min-max normalised over the file, and the precomputed `query_emb` and
`model_emb` are not used here: queries and model names are embedded with the checkpoint's encoder,
the one routing time embeds new queries with. The format carries no times; groups keep file order.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from searchrl.routing.gmtrouter.data import Interaction, LogError, UserLog, check_models, read_logs

FORMATS = ("auto", "searchrl", "gmtrouter")
Format = Literal["auto", "searchrl", "gmtrouter"]
# Groups are laid out a day apart and turns a minute apart only to keep file order; sessions come from ids.
ORIGIN = datetime(2025, 1, 1, tzinfo=UTC)


class OriginalTurn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    query: str = Field(min_length=1)
    rating: float
    response: str | None = None


class OriginalEntry(BaseModel):
    model_config = ConfigDict(extra="ignore")

    question_id: int | str
    turn: int | str
    judge: str = Field(min_length=1)
    model: str = Field(min_length=1)
    conversation: list[OriginalTurn] = Field(min_length=1)


def _entries(path: Path) -> list[tuple[int, OriginalEntry]]:
    out = []
    with path.open(encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                out.append((n, OriginalEntry.model_validate_json(text)))
            except ValidationError as e:
                err = e.errors()[0]
                field = ".".join(str(p) for p in err["loc"]) or "(line)"
                raise LogError(
                    f"{path}, line {n}: field {field}: {err['msg']}; fix: GMTRouter's processed format has "
                    "question_id, turn, judge, model and conversation [{query, rating, ...}]"
                ) from None
    if not out:
        raise LogError(f"{path}: no entries (expected GMTRouter's processed JSONL)")
    return out


def read_original_logs(path: str | Path) -> list[UserLog]:
    """One UserLog per judge; each group of consecutive lines a session, named `<question_id>/<turn>/<n>`."""
    path = Path(path)
    if not path.is_file():
        raise LogError(f"{path}: no such file (expected GMTRouter's processed JSONL, e.g. training_set.jsonl)")
    groups: list[list[tuple[int, OriginalEntry]]] = []
    for n, entry in _entries(path):
        key = (entry.question_id, entry.turn, entry.judge)
        if groups and (groups[-1][0][1].question_id, groups[-1][0][1].turn, groups[-1][0][1].judge) == key:
            groups[-1].append((n, entry))
        else:
            groups.append([(n, entry)])
    ratings = [t.rating for g in groups for _, e in g for t in e.conversation]
    low, high = min(ratings), max(ratings)
    users: dict[str, list[Interaction]] = {}
    for g, group in enumerate(groups):
        first_line, head = group[0]
        where = f"{path}, line {first_line}"
        if len(group) < 2:
            raise LogError(
                f"{where}: group (question_id={head.question_id!r}, turn={head.turn!r}, judge={head.judge!r}) has one "
                "entry; fix: put a question's answers by two or more models on consecutive lines"
            )
        if len({len(e.conversation) for _, e in group}) != 1:
            raise LogError(
                f"{where}: field conversation: the group's models have conversations of different lengths; "
                "fix: one turn per model at every step"
            )
        session = f"{head.question_id}/{head.turn}/{g}"
        for k, (_, entry) in enumerate(group):
            for j, turn in enumerate(entry.conversation):
                users.setdefault(entry.judge, []).append(
                    Interaction(
                        query=turn.query,
                        model_used=entry.model,
                        # The original's _normalize_ratings: min-max over the file (eps in the denominator).
                        user_feedback=(turn.rating - low) / (high - low + 1e-8),
                        timestamp=ORIGIN + timedelta(days=g, minutes=j, seconds=k),
                        session=session,
                    )
                )
    return [UserLog(user_id=judge, interactions=inters) for judge, inters in users.items()]


def detect_format(path: Path) -> Literal["searchrl", "gmtrouter"]:
    """GMTRouter's format when the first line has its `judge` and `conversation` fields, else ours."""
    with path.open(encoding="utf-8") as f:
        for text in f:
            if text.strip():
                try:
                    first = json.loads(text)
                except json.JSONDecodeError:
                    return "searchrl"  # its reader names the line and the fix
                original = isinstance(first, dict) and {"judge", "conversation"} <= set(first)
                return "gmtrouter" if original else "searchrl"
    return "searchrl"


def read_user_logs(path: str | Path, fmt: Format = "auto", models: list[str] | None = None) -> list[UserLog]:
    """Logs in either format; with `models`, a model outside that vocabulary is an error."""
    path = Path(path)
    if fmt == "auto" and path.is_file():
        fmt = detect_format(path)
    if fmt != "gmtrouter":
        return read_logs(path, models=models)
    users = read_original_logs(path)
    if models is not None:
        for user in users:
            check_models(user, set(models), f"{path}, judge {user.user_id}")
    return users
