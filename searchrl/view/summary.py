"""Per-step aggregates of a run's episodes and the curves drawn from them, beside the trainer's TensorBoard curves.

The episode records are always there (they are what the viewer opens), so every curve is computed from them; they
are the kept sample of a step, not all of it, so a TensorBoard curve of the same measure (the mean over every
sample) is drawn beside it when the run has one, each line named by its source.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from statistics import fmean
from typing import Literal

from pydantic import BaseModel, Field

from searchrl.episodes.reader import RunEpisodes
from searchrl.episodes.record import EpisodeRecord, Turn, split_turns

Source = Literal["episodes", "tensorboard"]
TOP_QUERIES = 5
# The components that say whether the answer matched a gold, the first logged one read: every formula of ours logs
# em; cover-EM (an answer that holds the gold among other words) would call a stuffed long answer right.
ANSWER_MATCH = ("em", "cem")


def is_right(record: EpisodeRecord) -> bool | None:
    """Whether the answer matched a gold: the reward's `em` component above 0 (`cem` where no em is logged). The
    score is read only when neither is, since stage 1's score is "searched with well-formed blocks", not a right
    answer. None when the record holds none of them (nothing to judge by)."""
    for key in ANSWER_MATCH:
        if key in record.components:
            return record.components[key] > 0
    return None if record.score is None else record.score > 0


def num_searches(record: EpisodeRecord) -> int:
    """The searches the environment reported (the `num_searches` component), else the queries the record holds."""
    return int(record.components.get("num_searches", len(record.queries)))


def safe_turns(record: EpisodeRecord) -> list[Turn]:
    """The record's turns; one turn of the whole text for a protocol this checkout does not know, so a record
    written by a newer project still opens."""
    try:
        return record.turns()
    except ValueError:
        return [Turn(text=record.solution)]


def queries_of(record: EpisodeRecord) -> list[str]:
    if record.queries:
        return record.queries
    try:
        return [t.query for t in split_turns(record.solution, record.protocol) if t.query]
    except ValueError:
        return []


class QueryCount(BaseModel):
    query: str
    count: int


class StepSummary(BaseModel):
    """One step's kept episodes in figures: what the compare view and the curves read."""

    step: int
    episodes: int
    reward_mean: float
    reward_min: float
    reward_max: float
    score_mean: float | None = Field(description="the stage's own measure (the reward's `score`)")
    right_rate: float | None = Field(
        description="share answered right (em > 0, see is_right), of those with a verdict"
    )
    format_ok_rate: float | None
    searches_mean: float
    searched_rate: float = Field(description="share of episodes with at least one search")
    answer_rate: float = Field(description="share of episodes with an answer")
    distinct_queries: int
    top_queries: list[QueryCount]
    response_tokens_mean: float | None
    response_chars_mean: float
    violation_rates: dict[str, float]
    any_violation_rate: float
    seconds_mean: float | None
    search_seconds_mean: float | None


def _mean_of(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return fmean(kept) if kept else None


def summarize_step(step: int, records: Sequence[EpisodeRecord], rules: Sequence[str]) -> StepSummary:
    rewards = [r.reward for r in records]
    verdicts = [is_right(r) for r in records]
    queries = Counter(" ".join(q.split()).lower() for r in records for q in queries_of(r))
    searches = [num_searches(r) for r in records]
    return StepSummary(
        step=step,
        episodes=len(records),
        reward_mean=fmean(rewards),
        reward_min=min(rewards),
        reward_max=max(rewards),
        score_mean=_mean_of([r.score for r in records]),
        right_rate=_mean_of([float(v) for v in verdicts if v is not None]),
        format_ok_rate=_mean_of([r.components.get("format_ok") for r in records]),
        searches_mean=fmean(searches),
        searched_rate=fmean(float(n > 0) for n in searches),
        answer_rate=fmean(float(r.answer is not None) for r in records),
        distinct_queries=len(queries),
        top_queries=[QueryCount(query=q, count=n) for q, n in queries.most_common(TOP_QUERIES)],
        response_tokens_mean=_mean_of([r.response_tokens for r in records]),
        response_chars_mean=fmean(len(r.solution) for r in records),
        violation_rates={rule: fmean(float(rule in r.violations) for r in records) for rule in rules},
        any_violation_rate=fmean(float(bool(r.violations)) for r in records),
        seconds_mean=_mean_of([r.seconds for r in records]),
        search_seconds_mean=_mean_of([r.search_seconds for r in records]),
    )


def rules_of(records: Sequence[EpisodeRecord]) -> list[str]:
    """Every format rule the run's reward logs (fired or not), by name."""
    prefix = "violation_"
    return sorted({k[len(prefix) :] for r in records for k in r.components if k.startswith(prefix)})


def summarize_steps(records: Sequence[EpisodeRecord]) -> list[StepSummary]:
    by_step: dict[int, list[EpisodeRecord]] = {}
    for r in records:
        if r.step is not None:
            by_step.setdefault(r.step, []).append(r)
    rules = rules_of(records)
    return [summarize_step(step, by_step[step], rules) for step in sorted(by_step)]


class Series(BaseModel):
    label: str
    source: Source
    points: list[tuple[int, float]]


class Plot(BaseModel):
    measure: str
    title: str
    unit: str
    series: list[Series]


# (key, what it shows, unit, the step figure drawn from the episodes, the TensorBoard scalar of the same measure).
PlotSpec = tuple[str, str, str, Callable[[StepSummary], float | None], str | None]
PLOTS: tuple[PlotSpec, ...] = (
    ("reward", "reward", "mean", lambda s: s.reward_mean, "reward"),
    ("score", "the stage's measure (score)", "mean", lambda s: s.score_mean, "score"),
    ("right", "answered right (em > 0)", "rate", lambda s: s.right_rate, None),
    ("format_ok", "format kept (format_ok)", "rate", lambda s: s.format_ok_rate, "format_ok"),
    ("num_searches", "searches an episode", "mean", lambda s: s.searches_mean, "num_searches"),
    ("answer_rate", "answered (has an answer)", "rate", lambda s: s.answer_rate, "has_answer"),
    ("response_tokens", "response length (tokens)", "mean", lambda s: s.response_tokens_mean, "response_length"),
)


def _points(steps: Sequence[StepSummary], value: Callable[[StepSummary], float | None]) -> list[tuple[int, float]]:
    return [(s.step, v) for s in steps if (v := value(s)) is not None]


def _titled(key: str, what: str, unit: str, series: list[Series]) -> Plot:
    named = {"episodes": "episodes (kept sample)", "tensorboard": "TensorBoard (every sample)"}
    sources = " + ".join(dict.fromkeys(named[s.source] for s in series))
    return Plot(measure=key, title=f"{what} · {sources}", unit=unit, series=series)


def measure_plots(steps: Sequence[StepSummary], curves: dict[str, list[tuple[int, float]]]) -> list[Plot]:
    plots = []
    for key, what, unit, value, tb_name in PLOTS:
        series = []
        if points := _points(steps, value):
            series.append(Series(label="episodes", source="episodes", points=points))
        if tb_name and curves.get(tb_name):
            series.append(Series(label="TensorBoard", source="tensorboard", points=list(curves[tb_name])))
        if key == "response_tokens" and not series:
            # Records written without token counts still have their text: its length in characters.
            key, what = "response_chars", "response length (characters)"
            series = [
                Series(label="episodes", source="episodes", points=_points(steps, lambda s: s.response_chars_mean))
            ]
        if series and series[0].points:
            plots.append(_titled(key, what, unit, series))
    return plots


def violation_plots(steps: Sequence[StepSummary], curves: dict[str, list[tuple[int, float]]]) -> list[Plot]:
    """A line per rule that fired at least once (a rule never broken would only flatten the others), with the share
    of episodes breaking any rule; the TensorBoard rates in a plot of their own when the run has them."""
    plots = []
    if steps:
        series = [Series(label="any rule", source="episodes", points=_points(steps, lambda s: s.any_violation_rate))]
        for rule in steps[0].violation_rates:
            points = [(s.step, s.violation_rates.get(rule, 0.0)) for s in steps]
            if any(v > 0 for _, v in points):
                series.append(Series(label=rule, source="episodes", points=points))
        plots.append(_titled("violations", "violations by rule", "rate", series))
    tb = [
        Series(label=name.removeprefix("violation_"), source="tensorboard", points=list(points))
        for name, points in sorted(curves.items())
        if name.startswith("violation_") and any(v > 0 for _, v in points)
    ]
    if tb:
        plots.append(_titled("violations_tensorboard", "violations by rule", "rate", tb))
    return plots


class RunSummary(BaseModel):
    run_dir: str
    version: str = Field(description="changes whenever a file of the run does: poll and compare")
    episodes: int
    steps: list[int]
    rules: list[str]
    has_tensorboard: bool
    skipped: dict[str, int] = Field(
        description="lines that were not records (a torn last line of a live run), by file"
    )
    step_summaries: list[StepSummary]
    plots: list[Plot]


def summarize(run: RunEpisodes, version: str) -> RunSummary:
    steps = summarize_steps(run.episodes)
    return RunSummary(
        run_dir=str(run.run_dir),
        version=version,
        episodes=len(run.episodes),
        steps=[s.step for s in steps],
        rules=rules_of(run.episodes),
        has_tensorboard=bool(run.curves),
        skipped=run.skipped,
        step_summaries=steps,
        plots=[*measure_plots(steps, run.curves), *violation_plots(steps, run.curves)],
    )
