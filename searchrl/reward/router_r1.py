"""Router-R1's reward (its `verl/trainer/main_ppo.py` format rule and `verl/utils/reward_score/qa_em.py`), on the
tags of the stage's protocol: the original's (`router-r1`: `<search> Model: question </search>`, `<information>`), or
R1-Searcher's spelling of them (`<|begin_of_query|> Model: question <|end_of_query|>` for its `<search>`, the
documents block for its `<information>`).

reward = -1                              on any format violation (nothing else counts then)
       = 0                               when the answer is wrong (F1: when its F1 is 0)
       = (1 - c) * metric                when it is right; the agent adds c * cost_reward (searchrl/reward/group.py)

(`cost_shape: penalty`, the named alternative: metric when right, and the agent subtracts c * cost / largest
recent cost from every episode.)
with c = `reward.cost_weight`. Violations: no tagged block at all; unequal open/close counts of a tag; an
empty or `...` think block; a tag inside a block; not exactly one answer, no think block, or a query
without its answer block; text before the first `<think>` or after `</answer>`; a query that is not
`name: question` with one colon, a non-empty question, no placeholder and no repeat of the name in the
question; a name that picks no pool model (`unknown_models` in the metadata the environment sends).
The answer is compared the way the original compares it: SQuAD normalisation (punctuation deleted, not
turned into spaces as R1-Searcher's metrics do), EM or token F1 over the golds.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from searchrl.metrics import squad_em as exact_match
from searchrl.metrics import squad_normalize
from searchrl.protocols import DEFAULT_PROTOCOL, PROTOCOLS, get_protocol, router_r1
from searchrl.reward.spec import RewardSpec

# The original's four tags, (open, close) by the original's name, in each protocol's spelling (its ROUTER_TAGS).
TAG_SETS: dict[str, dict[str, tuple[str, str]]] = {
    name: protocol.ROUTER_TAGS for name, protocol in PROTOCOLS.items() if protocol.ROUTER_TAGS is not None
}
TAGS = TAG_SETS[DEFAULT_PROTOCOL]
PLACEHOLDERS = router_r1.PLACEHOLDERS


class Tags:
    """One protocol's spelling of the four tags, with the patterns read from them."""

    def __init__(self, tags: dict[str, tuple[str, str]]) -> None:
        self.tags = tags
        self.all = tuple(t for pair in tags.values() for t in pair)
        # Leftmost block first, each open tag up to its own nearest close, as the original's backreference pattern.
        self.blocks = re.compile(
            "|".join(f"(?P<{name}>{re.escape(o)}(?P<{name}_body>.*?){re.escape(c)})" for name, (o, c) in tags.items()),
            re.S,
        )
        opens, closes = tags["answer"]
        self.answer = re.compile(re.escape(opens) + r"(.*?)" + re.escape(closes), re.S)


SPELLINGS = {name: Tags(tags) for name, tags in TAG_SETS.items()}
RULES = (
    "no_blocks",
    "tag_counts",
    "think_empty",
    "nesting",
    "structure",
    "outside_text",
    "query_format",
    "unknown_model",
)


def blocks(text: str, protocol: str = "r1-searcher") -> list[tuple[str, str]]:
    """(tag name, stripped content) of every block, left to right."""
    found = []
    for m in SPELLINGS[protocol].blocks.finditer(text):
        name = next(n for n in TAGS if m.group(n) is not None)
        found.append((name, m.group(f"{name}_body").strip()))
    return found


def query_malformed(content: str) -> bool:
    """Not `name: question` with one colon, a question, no placeholder, and the name not repeated in the question."""
    if content.count(":") != 1:
        return True
    name, question = (part.strip().lower() for part in content.split(":"))
    return not question or any(p in content.lower() for p in PLACEHOLDERS) or name in question


def violation(text: str, unknown_models: int = 0, protocol: str = "r1-searcher") -> str | None:
    """The first of Router-R1's format rules `text` breaks (checked in the original's order), or None.
    `text` is the response from its opening `<think>`, in `protocol`'s spelling of the tags."""
    spelling = SPELLINGS[protocol]
    found = blocks(text, protocol)
    if not found:
        return "no_blocks"
    if any(text.count(o) != text.count(c) for o, c in spelling.tags.values()):
        return "tag_counts"
    kinds = Counter(name for name, _ in found)
    if any(name == "think" and content in ("", "...") for name, content in found):
        return "think_empty"
    if any(tag in content for _, content in found for tag in spelling.all):
        return "nesting"
    if kinds["answer"] != 1 or kinds["think"] == 0 or kinds["search"] != kinds["information"]:
        return "structure"
    stripped = text.strip()
    if not stripped.startswith(spelling.tags["think"][0]) or not stripped.endswith(spelling.tags["answer"][1]):
        return "outside_text"
    if any(name == "search" and query_malformed(content) for name, content in found):
        return "query_format"
    if unknown_models > 0:
        return "unknown_model"
    return None


def f1(answer: str, golds: Sequence[str]) -> float:
    pred = squad_normalize(answer)
    best = 0.0
    for gold in map(squad_normalize, golds):
        if (pred in ("yes", "no", "noanswer") or gold in ("yes", "no", "noanswer")) and pred != gold:
            continue
        same = sum((Counter(pred.split()) & Counter(gold.split())).values())
        if same:
            precision, recall = same / len(pred.split()), same / len(gold.split())
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def last_answer(text: str, protocol: str = "r1-searcher") -> str | None:
    found = SPELLINGS[protocol].answer.findall(text)
    return found[-1].strip() if found else None


def score_router_r1(
    solution: str, golds: Sequence[str], spec: RewardSpec, metadata: Mapping[str, Any] | None = None
) -> tuple[float, float, dict[str, float]]:
    """(reward, score, logs) of one episode. Under R1-Searcher's tags `solution` follows a prompt ending in
    `<think>`, which the original's policy writes itself, so it is put back in front. `score` is the metric (dynamic
    filtering); `cost_applies` tells the agent to add the cost reward (a right, well-formed answer)."""
    protocol = spec.reads
    text = (get_protocol(protocol).PROMPT_END or "") + solution
    unknown = (metadata or {}).get("unknown_models", 0)
    broken = violation(text, unknown if isinstance(unknown, int) and not isinstance(unknown, bool) else 0, protocol)
    answer = last_answer(text, protocol)
    metrics = {"em": 0.0, "f1": 0.0}
    if answer is not None:
        metrics = {"em": exact_match(answer, golds), "f1": f1(answer, golds)}
    metric = metrics[spec.answer_metric]
    right = broken is None and metric > 0
    scale = 1.0 - spec.cost_weight if spec.cost_shape == "router_r1" else 1.0
    reward = -1.0 if broken is not None else scale * metric if right else 0.0
    logs = {
        "format_ok": float(broken is None),
        "has_answer": float(answer is not None),
        "num_searches": float(sum(1 for name, _ in blocks(text, protocol) if name == "search")),
        "cost_applies": float(right),
        **metrics,
        **{f"violation_{rule}": float(rule == broken) for rule in RULES},
    }
    return reward, metric, logs


def cost_reward(recent: Sequence[float]) -> float:
    """Router-R1's cost reward of the last episode in `recent`, the square roots of the costs of the last
    episodes, this one last: 1 - its place between the 5th and 95th percentiles, clipped to [0, 1] (the
    minimum and maximum while fewer than two are known; 0.5 when they coincide). Cheap is near 1.

    >>> cost_reward([4.0, 1.0]), cost_reward([1.0, 1.0]), round(cost_reward([1.0, 2.0, 3.0]), 3)
    (1.0, 0.5, 0.0)
    """
    values = np.asarray(recent, dtype=float)
    low, high = np.percentile(values, [5, 95]) if len(values) >= 2 else (values.min(), values.max())
    if high - low < 1e-8:
        return 0.5
    return 1.0 - float(np.clip((values[-1] - low) / (high - low), 0.0, 1.0))
