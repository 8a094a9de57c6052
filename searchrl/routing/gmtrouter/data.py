"""User interaction logs for personalised routing: one user per JSONL line, validated with pydantic.

`user_feedback` is a rating in [0, 1]: 1 = the answer fully satisfied the user, 0 = useless. Map other
scales onto it before writing the log (thumbs up/down -> 1/0, 1-5 stars -> (stars - 1) / 4). A user's
interactions, sorted by time, form sessions (multi-turn conversations): when the interactions name
their `session`, that id delimits them; otherwise a gap longer than `session_gap_minutes` starts a new
one, so re-asking a question of another model a minute later is a turn of the same session.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

DEFAULT_SESSION_GAP_MINUTES = 30.0


class LogError(ValueError):
    """A log line that does not validate; the message names the file, line, field and fix."""


class Interaction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, description="what the user asked")
    model_used: str = Field(min_length=1, description="the pool model that answered")
    user_feedback: float = Field(ge=0.0, le=1.0, description="rating in [0, 1]: 1 satisfied, 0 useless")
    timestamp: datetime = Field(description="ISO 8601 string or Unix epoch seconds")
    session: str | None = Field(None, min_length=1, description="conversation id; default: cut by time gaps")

    @field_validator("user_feedback", mode="before")
    @classmethod
    def _no_booleans(cls, value: object) -> object:
        # A thumbs-up written as `true` would silently read as 1.0; ask for the number instead.
        if isinstance(value, bool):
            raise ValueError("a boolean; write thumbs up/down as 1/0")
        return value

    @field_validator("timestamp", mode="before")
    @classmethod
    def _parse_time(cls, value: object) -> object:
        if isinstance(value, datetime):
            return value
        if isinstance(value, bool):
            raise ValueError("a boolean; write an ISO 8601 string or Unix epoch seconds")
        if isinstance(value, int | float):
            return datetime.fromtimestamp(float(value), tz=UTC)
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"{value!r} is not ISO 8601 (e.g. 2025-01-31T14:05:00Z) nor epoch seconds") from None
        raise ValueError("write an ISO 8601 string or Unix epoch seconds")

    @field_validator("timestamp")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        # Naive times are taken as UTC so that mixing the two forms still orders correctly.
        return value if value.tzinfo else value.replace(tzinfo=UTC)


class UserLog(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: str = Field(min_length=1)
    interactions: list[Interaction] = Field(min_length=1)
    preferred_models: list[str] = Field(default_factory=list, description="models the user said they prefer")
    context: dict[str, Any] = Field(default_factory=dict, description="free-form; carried, not used by the model")

    @field_validator("interactions")
    @classmethod
    def _by_time(cls, value: list[Interaction]) -> list[Interaction]:
        named = [i.session is not None for i in value]
        if any(named) and not all(named):
            k = named.index(False)
            raise ValueError(f"interaction {k} names no session while others do; name one for all or for none")
        return sorted(value, key=lambda i: i.timestamp)

    def models(self) -> set[str]:
        return {i.model_used for i in self.interactions} | set(self.preferred_models)


def _fix_for(field: str, kind: str) -> str:
    if field.endswith("user_feedback"):
        return "a rating in [0, 1]: map thumbs up/down to 1/0 and 1-5 stars to (stars-1)/4"
    if field.endswith("timestamp"):
        return "an ISO 8601 string (2025-01-31T14:05:00Z) or Unix epoch seconds"
    if kind == "extra_forbidden":
        return "remove it; a line holds user_id, interactions, preferred_models, context"
    if kind == "missing":
        return "add it"
    if field == "interactions":
        return "give every interaction of the user a `session` id, or leave it out of all of them"
    return "see the log format in docs/OPTIONS.md (GMTRouter)"


def parse_line(text: str, where: str) -> UserLog:
    try:
        return UserLog.model_validate_json(text)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(line)"
        if err["type"] in ("json_invalid", "model_type"):
            raise LogError(f"{where}: not a JSON object ({err['msg']}); write one user per line") from None
        raise LogError(f"{where}: field {field}: {err['msg']}; fix: {_fix_for(field, err['type'])}") from None


def read_logs(path: str | Path, models: Iterable[str] | None = None) -> list[UserLog]:
    """Every user of a JSONL log, validated; with `models`, a model outside that vocabulary is an error."""
    path = Path(path)
    if not path.is_file():
        raise LogError(f"{path}: no such file (expected JSONL, one user per line)")
    known = set(models) if models is not None else None
    users: list[UserLog] = []
    first_line: dict[str, int] = {}
    with path.open(encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                continue
            where = f"{path}, line {n}"
            user = parse_line(text, where)
            if user.user_id in first_line:
                raise LogError(
                    f"{where}: field user_id: {user.user_id!r} already on line {first_line[user.user_id]}; "
                    "fix: merge the two lines' interactions into one"
                )
            first_line[user.user_id] = n
            if known is not None:
                check_models(user, known, where)
            users.append(user)
    if not users:
        raise LogError(f"{path}: no users (expected JSONL, one user per line)")
    return users


def check_models(user: UserLog, known: set[str], where: str) -> None:
    for k, inter in enumerate(user.interactions):
        if inter.model_used not in known:
            raise LogError(
                f"{where}: field interactions.{k}.model_used: unknown model {inter.model_used!r}; fix: use one of "
                f"{sorted(known)} or retrain with it"
            )
    for k, name in enumerate(user.preferred_models):
        if name not in known:
            raise LogError(
                f"{where}: field preferred_models.{k}: unknown model {name!r}; fix: use one of {sorted(known)}"
            )


def write_logs(users: Iterable[UserLog], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for user in users:
            f.write(user.model_dump_json(exclude_none=True) + "\n")
    tmp.replace(path)


@dataclass(frozen=True)
class Session:
    user_id: str
    interactions: tuple[Interaction, ...]


def sessions_of(user: UserLog, gap_minutes: float = DEFAULT_SESSION_GAP_MINUTES) -> list[Session]:
    """The user's sessions in time order: grouped by their `session` id when the log names them, else cut
    wherever more than `gap_minutes` pass between two turns."""
    if user.interactions[0].session is not None:
        by_id: dict[str | None, list[Interaction]] = {}
        for inter in user.interactions:
            by_id.setdefault(inter.session, []).append(inter)
        return [Session(user.user_id, tuple(s)) for s in by_id.values()]
    out: list[list[Interaction]] = []
    last: datetime | None = None
    for inter in user.interactions:
        if last is None or (inter.timestamp - last).total_seconds() > gap_minutes * 60:
            out.append([])
        out[-1].append(inter)
        last = inter.timestamp
    return [Session(user.user_id, tuple(s)) for s in out]


def split_sessions(
    user: UserLog, keep: int | float, gap_minutes: float = DEFAULT_SESSION_GAP_MINUTES
) -> tuple[list[Session], list[Session]]:
    """The user's earliest sessions (a count, or a fraction of them) and the rest, in time order."""
    sessions = sessions_of(user, gap_minutes)
    n = keep if isinstance(keep, int) else int(round(keep * len(sessions)))
    return sessions[:n], sessions[n:]
