"""The episodes list: the filters of `GET /api/episodes`, and an episode as a list row and as its whole record.

The page's export applies the same filters in JavaScript (static/page.js `matches`) over the rows embedded in the
file; tests/test_view_browser.py checks the two count alike.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from searchrl.episodes.record import EpisodeRecord, Turn
from searchrl.view.store import Snapshot
from searchrl.view.summary import is_right, num_searches, safe_turns


class ViewError(Exception):
    """A request the API refuses, naming the parameter at fault; answered with `status` and the project's error
    body (searchrl.server.error_response)."""

    status = 400

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class FilterError(ViewError):
    """A filter that is not one (400)."""


class NotFound(ViewError):
    """No such episode or step in the run (404)."""

    status = 404


SEARCHES = re.compile(r"^(\d{1,4})(\+?)$")
SORTS = ("time", "reward", "-reward", "searches", "-searches")


@dataclass(frozen=True)
class EpisodeFilter:
    """Which episodes a list shows; every field None shows all. The page's export applies the same rules in
    JavaScript (page.js `matches`), so a filter means one thing served and exported."""

    step: int | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    # "any": broke some rule; "none": broke none; else a rule's name.
    violation: str | None = None
    # (n, at_least): exactly n searches, or n or more ("2+").
    searches: tuple[int, bool] | None = None
    right: bool | None = None
    text: re.Pattern[str] | None = None
    sort: str = "time"

    def matches(self, r: EpisodeRecord) -> bool:
        if self.step is not None and r.step != self.step:
            return False
        if self.min_reward is not None and r.reward < self.min_reward:
            return False
        if self.max_reward is not None and r.reward > self.max_reward:
            return False
        if self.violation is not None and not _violation_matches(self.violation, r.violations):
            return False
        if self.searches is not None:
            n, at_least = self.searches
            found = num_searches(r)
            if found < n or (not at_least and found != n):
                return False
        if self.right is not None and is_right(r) is not self.right:
            return False
        return self.text is None or any(self.text.search(t) for t in (r.prompt, r.solution, r.answer or ""))

    def apply(self, records: Sequence[EpisodeRecord]) -> list[EpisodeRecord]:
        found = [r for r in records if self.matches(r)]
        if self.sort == "time":
            return found
        key = (lambda r: r.reward) if self.sort.endswith("reward") else num_searches
        return sorted(found, key=key, reverse=self.sort.startswith("-"))


def _violation_matches(wanted: str, violations: list[str]) -> bool:
    if wanted == "any":
        return bool(violations)
    if wanted == "none":
        return not violations
    return wanted in violations


def _number(field: str, text: str | None) -> float | None:
    if text is None or text.strip() == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise FilterError(field, f"{text[:40]!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise FilterError(field, "must be a finite number")
    return value


def parse_filter(params: dict[str, str | None], snapshot: Snapshot) -> EpisodeFilter:
    """The filter the query parameters describe; FilterError (400) for a value that is not one, KeyError-free:
    unknown parameters are ignored. An unknown step is the caller's 404 (it is a resource, not a bad value)."""
    step = _number("step", params.get("step"))
    if step is not None and not step.is_integer():
        raise FilterError("step", f"must be a whole number, got {params.get('step')!r}")
    low, high = _number("min_reward", params.get("min_reward")), _number("max_reward", params.get("max_reward"))
    if low is not None and high is not None and low > high:
        raise FilterError("min_reward", f"{low:g} is above max_reward {high:g}")
    violation = (params.get("violation") or "").strip() or None
    rules = snapshot.summary.rules
    if violation is not None and violation not in ("any", "none", *rules):
        known = ", ".join(["any", "none", *rules])
        raise FilterError("violation", f"{violation[:40]!r} is not a rule of this run (one of: {known})")
    searches = None
    if text := (params.get("searches") or "").strip():
        if (m := SEARCHES.match(text)) is None:
            raise FilterError("searches", f"{text[:40]!r}: give a count (2) or a least count (2+)")
        searches = (int(m.group(1)), m.group(2) == "+")
    right = {None: None, "": None, "right": True, "wrong": False}.get(params.get("correct"), "bad")
    if right == "bad":
        raise FilterError("correct", f"{str(params.get('correct'))[:40]!r}: give right or wrong")
    sort = params.get("sort") or "time"
    if sort not in SORTS:
        raise FilterError("sort", f"{sort[:40]!r}: one of {', '.join(SORTS)}")
    q = (params.get("q") or "").strip()
    return EpisodeFilter(
        step=None if step is None else int(step),
        min_reward=low,
        max_reward=high,
        violation=violation,
        searches=searches,
        right=right,  # type: ignore[arg-type]
        text=re.compile(re.escape(q), re.IGNORECASE) if q else None,
        sort=sort,
    )


def page_bounds(limit: str | None, offset: str | None, most: int = 500) -> tuple[int, int]:
    bounds = []
    for field_name, text, default, low, high in (("limit", limit, 50, 1, most), ("offset", offset, 0, 0, 10**9)):
        if text is None or text == "":
            bounds.append(default)
            continue
        if not text.isdigit() or not low <= int(text) <= high:
            raise FilterError(field_name, f"{text[:40]!r}: a whole number from {low} to {high}")
        bounds.append(int(text))
    return bounds[0], bounds[1]


PROMPT_TAIL = 200
# Chat-template and protocol tags, dropped from the prompt's end so its question is what is left there.
TEMPLATE_TAGS = re.compile(r"<\|[^|<>\s]{1,40}\|>|</?think>")
# Where a question starts in the templates of every protocol: R1-Searcher's `User:`, Search-R1's `Question:`, the
# user turn of ChatML and Llama 3 (the latest one found is the question's).
ASKED = ("Question:", "User:", "<|im_start|>user", "<|start_header_id|>user<|end_header_id|>")
ASSISTANT_END = re.compile(r"\s*(?:assistant|Assistant:?)\s*$")


def prompt_tail(prompt: str) -> str:
    """The prompt from its last question marker on (ASKED), template tags dropped and whitespace collapsed; its
    last PROMPT_TAIL characters: the question, in a list row."""
    at, marker = max((prompt.rfind(m), m) for m in ASKED)
    text = prompt[at + len(marker) :] if at >= 0 else prompt
    return ASSISTANT_END.sub("", " ".join(TEMPLATE_TAGS.sub(" ", text).split())).strip()[-PROMPT_TAIL:]


class EpisodeRow(BaseModel):
    """An episode as the list shows it."""

    id: str
    step: int
    time: float
    reward: float
    score: float | None
    right: bool | None = Field(description="answer matched a gold (em > 0; cem without em, the score without either)")
    num_searches: int
    violations: list[str]
    answer: str | None
    gold: list[str]
    prompt_tail: str = Field(description="the prompt's end, template tags dropped: where its question is")
    response_tokens: int | None


class EpisodeDetail(EpisodeRow):
    """An episode whole: its solution as turns (their texts and blocks joined are the solution, character for
    character), and everything the reward and the environment logged."""

    source: str
    protocol: str
    prompt: str
    turns: list[Turn]
    queries: list[str]
    components: dict[str, float]
    prompt_tokens: int | None
    seconds: float | None
    search_seconds: float | None


class EpisodePage(BaseModel):
    total: int = Field(description="episodes that pass the filter, on every page")
    offset: int
    limit: int
    episodes: list[EpisodeRow]


def row_fields(r: EpisodeRecord) -> dict:
    return {
        "id": r.id,
        "step": r.step or 0,
        "time": r.time,
        "reward": r.reward,
        "score": r.score,
        "right": is_right(r),
        "num_searches": num_searches(r),
        "violations": r.violations,
        "answer": r.answer,
        "gold": r.gold,
        "prompt_tail": prompt_tail(r.prompt),
        "response_tokens": r.response_tokens,
    }


def row_of(r: EpisodeRecord) -> EpisodeRow:
    return EpisodeRow(**row_fields(r))


def detail_of(r: EpisodeRecord) -> EpisodeDetail:
    return EpisodeDetail(
        **row_fields(r),
        source=r.source,
        protocol=r.protocol,
        prompt=r.prompt,
        turns=safe_turns(r),
        queries=r.queries,
        components=r.components,
        prompt_tokens=r.prompt_tokens,
        seconds=r.seconds,
        search_seconds=r.search_seconds,
    )


def list_page(snapshot: Snapshot, chosen: EpisodeFilter, limit: int, offset: int) -> EpisodePage:
    found = chosen.apply(snapshot.episodes)
    rows = [row_of(r) for r in found[offset : offset + limit]]
    return EpisodePage(total=len(found), offset=offset, limit=limit, episodes=rows)
