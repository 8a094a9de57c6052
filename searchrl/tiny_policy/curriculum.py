"""The tiny policy's copy curriculum: what its warm start is trained on, so that it copies a name from the
question into its query and, sometimes, a city from the documents into its answer, as a base model does. Its
episodes are written in the World's protocol (searchrl/tiny_policy/writing.py).

The mixture alone (searchrl/tiny_policy/mixture.py) never teaches copying: its 200 training people are few
enough to memorise, and a memorised name is not a copied one (no held-out query named its person). Made-up
people, a fresh name for every episode, make copying the only way to lower the loss. The recipe:

1. a short copy task (the question without the instruction text, correct episodes only, the birthplace
   copied every time), mostly made-up people, at a large batch: copying appears here;
2. the full template and the mixture's kinds (broken ones included), real questions, training people and
   made-up ones, still copying every time for a while;
3. the same at the mixture's copy rate, so the policy answers with the documents' city only sometimes and
   stage 2 has something to learn.

An episode is a list of segments (text, trained?): the prompt and the documents are not trained on, the
policy's own segments are, as RL's action mask has it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from searchrl.qa_data.fictional import CITIES, made_up_name, person
from searchrl.tiny_policy.mixture import MIXTURE, Question, trajectory
from searchrl.tiny_policy.writing import WRITINGS, Writing

Segments = list[tuple[str, bool]]
EOS = "</s>"


@dataclass(frozen=True)
class Phase:
    steps: int
    batch: int
    short: bool  # the short copy task: no instruction text, correct episodes of fictional people only
    copy_rate: float  # how often a fictional answer is the city the documents name
    real: float = 0.25  # share of real stage-1 questions (full phases only)
    trained_people: float = 0.25  # share of the training split's people; the rest are made up


@dataclass(frozen=True)
class Recipe:
    """Found on 2 CPU cores and checked on a GPU sweep (docs/REHEARSAL.md, "What the tiny policy learns")."""

    seed: int = 0
    lr: float = 3e-3
    warmup: int = 50
    min_lr_frac: float = 0.1  # cosine decay to this share of lr over all phases
    micro_batch: int = 4  # episodes sorted by length, then cut in micro-batches: less padding on a CPU
    phases: tuple[Phase, ...] = field(
        default=(
            Phase(1600, 64, short=True, copy_rate=1.0, real=0.0, trained_people=0.3),
            Phase(400, 64, short=False, copy_rate=1.0),
            Phase(300, 64, short=False, copy_rate=0.25),
        )
    )

    @property
    def steps(self) -> int:
        return sum(p.steps for p in self.phases)


@dataclass(frozen=True)
class World:
    """What episodes are drawn from: the template, the real questions with the documents their keyword query
    retrieves, the training split's people with their passages, and the names no made-up person may take."""

    template: str
    real: Sequence[tuple[Question, Sequence[str]]]
    people: Sequence[tuple[Question, Sequence[str]]]
    taken: frozenset[str]
    writing: Writing = WRITINGS["r1-searcher"]

    def prompt(self, question: str, short: bool) -> str:
        text = self.template.replace("{question}", question)
        return text[text.rfind(self.writing.SHORT_FROM) :] if short else text


def segments(messages: Sequence[dict[str, str]]) -> Segments:
    """SFT messages as segments: the assistant's turns are trained on, the prompt and the documents are not."""
    return [(m["content"], m["role"] == "assistant") for m in messages]


def made_up(rng: random.Random, taken: frozenset[str]) -> tuple[Question, list[str]]:
    who = person(rng, made_up_name(rng, taken))
    passages = [f"Title: {who.name} Text: {t}" for t in who.passages]
    return Question(who.question, who.city, who.name, tuple(CITIES)), passages


def episode(world: World, phase: Phase, rng: random.Random) -> Segments:
    draw = rng.random()
    if phase.short or draw >= phase.real:
        if rng.random() < phase.trained_people:
            q, docs = rng.choice(world.people)
        else:
            q, docs = made_up(rng, world.taken)
        docs = rng.sample(list(docs), len(docs))  # the birthplace passage anywhere among the three
    else:
        q, docs = rng.choice(world.real)
    kind = "correct" if phase.short else rng.choices(list(MIXTURE), list(MIXTURE.values()))[0]
    prompt = world.prompt(q.question, phase.short)
    messages = trajectory(kind, prompt, q, docs, rng, EOS, phase.copy_rate, world.writing)
    return segments(messages)
