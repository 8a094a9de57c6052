"""The search environment step, one implementation shared by training (the OpenRLHF agent) and evaluation.

A segment that ends in a search action of the run's protocol (R1-Searcher's query tags, Search-R1's `<search>`) is a
search: the query is sent to the backend and the documents block comes back as feedback (outside the action, so
never trained on). Anything else ends the episode, and the reward server scores the whole text; under Search-R1's
protocol a segment that neither searches nor answers is told so and the episode goes on, as its generation.py does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from searchrl.metrics import as_golds, normalize_answer
from searchrl.protocols import DEFAULT_PROTOCOL, TagProtocol, get_protocol
from searchrl.protocols.segments import split_queries
from searchrl.reward.components import documents_contain, evidence_golds, process_reward
from searchrl.reward.spec import RewardSpec
from searchrl.rollout.reward_client import RewardClient, RewardResult
from searchrl.routing.llm_router import UNROUTED
from searchrl.search.base import Passage, SearchBackend, SearchError, SearchRefusedError, r1_text
from searchrl.stage.config import EpisodeConfig

DEFAULT = get_protocol(DEFAULT_PROTOCOL)

log = logging.getLogger("searchrl.rollout.environment")
# A retrieval outage fails every episode's search at once; one warning per interval, with the count, says so
# without flooding the log of a thousand-episode batch.
WARN_EVERY_S = 10.0
SEARCH_FAILED = "The search failed ({reason}); no documents are available for this query."
NOTHING_FOUND = "No documents were found for this query."


@dataclass
class Episode:
    """What the environment knows of one episode; the metadata it reports comes from here."""

    prompt: str
    label: Any
    solution: str = ""
    queries: list[str] = field(default_factory=list)
    num_searches: int = 0
    search_errors: int = 0
    search_seconds: float = 0.0
    capped: bool = False
    gold_hits: int = 0  # searches whose new passages, from new queries, held a gold answer
    num_queries: int = 0  # queries sent to the backend; more than num_searches in multi-query mode
    cost: float = 0.0  # what the backend charged (LLM routing), summed over the episode
    unknown_models: int = 0  # routed queries whose name picked no pool model (Router-R1 punishes them)
    process_reward: float = 0.0  # the process term added to the outcome at the end
    turns: int = 0  # segments that searched or were invalid, which Search-R1's turn limit counts
    invalid_actions: int = 0  # segments that neither searched nor answered (Search-R1's protocol goes on after one)
    sent: set[str] = field(default_factory=set)  # normalised queries sent so far
    seen: set[str] = field(default_factory=set)  # passages shown so far, by id

    def metadata(self) -> dict[str, Any]:
        found = {"num_searches": self.num_searches, "search_errors": self.search_errors}
        # Sent only when a routed query picked no pool model, so other stages' requests stay as they were.
        return {**found, "unknown_models": self.unknown_models} if self.unknown_models else found


class Tokenizer(Protocol):
    def __call__(self, text: str, add_special_tokens: bool = ...) -> Any: ...
    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...


@dataclass(frozen=True)
class StepOutcome:
    feedback: str
    done: bool
    query: str | None = None


class SearchEnvironment:
    def __init__(
        self,
        search: SearchBackend,
        episode: EpisodeConfig,
        reward: RewardSpec | None = None,
        protocol: TagProtocol = DEFAULT,
    ) -> None:
        """`reward`: the spec whose process weight the episode's end applies (None: no process term); `protocol`:
        the tags the policy writes and the documents come back in."""
        self.search = search
        self.config = episode
        self.protocol = protocol
        self.reward = reward
        self.process_weight = reward.process_weight if reward is not None else 0.0
        # The policy's tokenizer, which max_tokens_per_query counts in; the agent sets it from OpenRLHF's call.
        self.tokenizer: Tokenizer | None = None
        self.failed_searches = 0  # over the environment's life; each episode counts its own in search_errors
        self._unreported = 0
        self._warned_at = -WARN_EVERY_S

    async def step(self, ep: Episode, action_text: str) -> StepOutcome:
        """Append the action; search when it asks for one, otherwise end the episode."""
        return (await self.step_batch([ep], [action_text]))[0]

    async def step_batch(self, episodes: list[Episode], actions: list[str]) -> list[StepOutcome]:
        """One step of several episodes; their searches go to the backend as one batch."""
        outcomes: list[StepOutcome | None] = [None] * len(episodes)
        searching: list[int] = []
        protocol, turn_limit = self.protocol, self.config.max_turns
        for i, (ep, action) in enumerate(zip(episodes, actions, strict=True)):
            ep.solution += action
            query = protocol.search_query(action)
            turns_left = turn_limit is None or ep.turns < turn_limit
            if query is None:
                if protocol.INVALID_ACTION is None or not turns_left or protocol.answered(action):
                    outcomes[i] = StepOutcome(feedback="", done=True)
                else:
                    ep.turns += 1
                    ep.invalid_actions += 1
                    feedback = self.observation(protocol.INVALID_ACTION)
                    ep.solution += feedback
                    outcomes[i] = StepOutcome(feedback=feedback, done=False)
            elif not turns_left:
                # Search-R1's last turn is generated without search: its query is not run and the episode ends.
                ep.capped = True
                outcomes[i] = StepOutcome(feedback="", done=True, query=query)
            elif ep.num_searches >= self.config.max_searches:
                # Over budget: the episode ends with the query unanswered, which the format rules penalise.
                ep.capped = True
                outcomes[i] = StepOutcome(feedback="", done=True, query=query)
            else:
                ep.queries.append(query)
                ep.num_searches += 1
                ep.turns += 1
                searching.append(i)
        if searching:
            cfg = self.config
            split = [
                split_queries(episodes[i].queries[-1], cfg.query_separator, cfg.max_queries_per_block)
                for i in searching
            ]
            t0 = time.perf_counter()
            answers = await self._search_split(split)
            elapsed = time.perf_counter() - t0
            errors = [a for a in answers if isinstance(a, SearchError)]
            if errors:
                self._report_failure(errors[-1], len(errors))
            for i, qs, answer in zip(searching, split, answers, strict=True):
                ep = episodes[i]
                ep.num_queries += len(qs)
                ep.search_seconds += elapsed
                if isinstance(answer, SearchError):
                    # A retrieval outage or a refused query must not kill a rollout batch: the episode goes on
                    # with a "search failed" block, and the failure is counted.
                    reason = str(answer)[:200] or type(answer).__name__
                    feedback = protocol.message_block(SEARCH_FAILED.format(reason=reason), after=actions[i])
                    ep.search_errors += 1
                else:
                    feedback = self._results_block(qs, answer, actions[i])
                    ep.cost += sum(p.cost for hits in answer for p in hits)
                    ep.unknown_models += sum(p.id == UNROUTED for hits in answer for p in hits)
                    if self.process_weight > 0:
                        ep.gold_hits += self._new_evidence(ep, qs, answer)
                feedback = self.observation(feedback)
                ep.solution += feedback
                outcomes[i] = StepOutcome(feedback=feedback, done=False, query=ep.queries[-1])
        return [o for o in outcomes if o is not None]

    async def _search_split(self, split: list[list[str]]) -> list[list[list[Passage]] | SearchError]:
        """Each episode's results for its queries, asked as one batch, or the error that stopped them. A batch
        the server refuses as sent (one query over its length limit, more queries than it takes) is asked again
        in halves, so only the episode whose query was refused gets a "search failed" block."""
        flat = [q for qs in split for q in qs]
        try:
            found = iter(await self.search.search(flat, self.config.top_k))
            return [[next(found) for _ in qs] for qs in split]
        except SearchRefusedError as e:
            if len(split) == 1:
                return [e]
            half = len(split) // 2
            first, second = await asyncio.gather(self._search_split(split[:half]), self._search_split(split[half:]))
            return first + second
        except SearchError as e:
            # Wrong credentials or a replay miss: every later search would fail too, so stop now.
            if e.ends_run:
                raise
            return [e] * len(split)

    def _report_failure(self, error: SearchError, episodes: int) -> None:
        """A warning naming the failure and how many searches failed since the last one (at most one per
        WARN_EVERY_S): training on "search failed" blocks must never go unnoticed."""
        self.failed_searches += episodes
        self._unreported += episodes
        now = time.monotonic()
        if now - self._warned_at < WARN_EVERY_S:
            return
        log.warning(
            "%d searches failed (%d since the environment started); their episodes go on with a 'search failed' "
            "documents block, counted in extra_logs' search_errors. Last error: %s",
            self._unreported,
            self.failed_searches,
            error,
        )
        self._unreported = 0
        self._warned_at = now

    @staticmethod
    def _new_evidence(ep: Episode, queries: list[str], results: list[list[Passage]]) -> bool:
        """Whether this search brought a gold answer into view: only queries not sent before in the episode
        count, and of their passages only those not shown before, so repeating a search earns nothing."""
        fresh = []
        for query, found in zip(queries, results, strict=True):
            key = normalize_answer(query)
            if key in ep.sent:
                continue
            ep.sent.add(key)
            for passage in found:
                if (passage.id or passage.text) not in ep.seen:
                    ep.seen.add(passage.id or passage.text)
                    fresh.append(r1_text(passage))
        return ep.label is not None and documents_contain(fresh, evidence_golds(as_golds(ep.label)))

    def _results_block(self, queries: list[str], results: list[list[Passage]], after: str) -> str:
        """The block a search's results are appended in. One query per block: the passages, as the protocol writes
        one. Multi-query mode (RAG-R1): each query and its own documents as `Doc i:` lines, each query's documents
        cut to the token budget on their own, so one query cannot crowd out another."""
        budget, protocol = self.config.max_tokens_per_query, self.protocol
        if self.config.max_queries_per_block == 1:
            bare = self.config.bare_titles
            entries = self._within([protocol.passage_entry(p, bare) for p in results[0]], budget)
            return (
                protocol.documents_block(entries, after=after)
                if entries
                else protocol.message_block(NOTHING_FOUND, after=after)
            )
        documents = [
            self._within(
                [
                    f"Doc {j}: {protocol.passage_entry(p, self.config.bare_titles)}"
                    for j, p in enumerate(found, start=1)
                ],
                budget,
            )
            for found in results
        ]
        return protocol.queries_block(queries, documents, NOTHING_FOUND, after=after)

    def observation(self, feedback: str) -> str:
        """What the episode is shown: the feedback's first episode.max_observation_tokens tokens, as Search-R1's
        `_process_next_obs` cuts them (a cut documents block loses its closing tag)."""
        limit = self.config.max_observation_tokens
        return feedback if limit is None else self._cut(feedback, limit)[0]

    def _within(self, texts: list[str], budget: int | None) -> list[str]:
        """The texts in order up to `budget` tokens in all: the one that crosses it is cut, the rest dropped."""
        if budget is None:
            return texts
        kept = []
        for text in texts:
            if budget <= 0:
                break
            cut, used = self._cut(text, budget)
            kept.append(cut)
            budget -= used
        return kept

    def _cut(self, text: str, limit: int) -> tuple[str, int]:
        if self.tokenizer is None:
            words = text.split()
            return (text, len(words)) if len(words) <= limit else (" ".join(words[:limit]), limit)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return (text, len(ids)) if len(ids) <= limit else (self.tokenizer.decode(ids[:limit]), limit)

    async def finish(self, ep: Episode, rewards: RewardClient, budget_cut: bool = False) -> RewardResult:
        """Score the episode, finished or cut by the context budget; the environment's own figures join
        the reward's components, under the same keys either way."""
        result = await rewards.score(ep.prompt + ep.solution, ep.prompt, ep.label, ep.metadata())
        reward, logs = result.reward, dict(result.extra_logs)
        logs.update(
            searched=float(ep.num_searches > 0),
            num_searches=float(ep.num_searches),
            num_queries=float(ep.num_queries),
            search_errors=float(ep.search_errors),
            search_latency_ms=1000.0 * ep.search_seconds / ep.num_searches if ep.num_searches else 0.0,
            search_capped=float(ep.capped),
            budget_cut=float(budget_cut),
        )
        if self.protocol.INVALID_ACTION is not None:
            logs.update(invalid_actions=float(ep.invalid_actions))
        # A web backend's meter, as the run's totals so far: TensorBoard's train/web_* is their mean over a step.
        if (budget := getattr(self.search, "web_budget", None)) is not None:
            logs.update(budget.scalars())
        if self.reward is not None and self.process_weight > 0:
            violated = logs.get("format_ok", 0.0) < 1.0
            ep.process_reward = process_reward(
                self.process_weight, ep.gold_hits > 0, reward, self.reward.bounds()[1], violated
            )
            reward += ep.process_reward
            logs.update(gold_hits=float(ep.gold_hits), process_reward=ep.process_reward)
        return RewardResult(reward, result.score, logs)
