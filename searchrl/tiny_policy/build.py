"""Builds the tiny policy's warm start: a random-init Qwen2-shaped policy and its tokenizer
(searchrl/tiny_policy/model.py), trained on the copy curriculum (searchrl/tiny_policy/curriculum.py) in plain
PyTorch (searchrl/tiny_policy/supervise.py), then probed on the development people (searchrl/tiny_policy/probe.py);
the held-out people are left to the learning reports.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from searchrl.paths import EXAMPLES
from searchrl.qa_data.fictional import SPLITS
from searchrl.tiny_policy import supervise
from searchrl.tiny_policy.curriculum import EOS, Recipe, World, made_up, segments
from searchrl.tiny_policy.mixture import Question, fictional_questions, real_questions, trajectory
from searchrl.tiny_policy.model import build_policy
from searchrl.tiny_policy.probe import probe
from searchrl.tiny_policy.writing import WRITINGS, Writing

Retrieve = Callable[[list[str]], list[list[str]]]


def fictional_people(split: str) -> list[tuple[Question, list[str]]]:
    """The split's questions with their person's own passages, as the environment shows passages."""
    passages: dict[str, list[str]] = {}
    for line in (EXAMPLES / "fictional/corpus.jsonl").open(encoding="utf-8"):
        p = json.loads(line)
        passages.setdefault(p["title"], []).append(f"Title: {p['title']} Text: {p['text']}")
    return [(q, passages[q.query]) for q in fictional_questions(split)]


def world(template: str, retrieve: Retrieve, writing: Writing = WRITINGS["r1-searcher"]) -> World:
    real = real_questions()
    found = retrieve([q.query for q in real])
    every_name = {q.query for split in SPLITS for q, _ in fictional_people(split)}
    people = fictional_people("train")
    return World(template, list(zip(real, found, strict=True)), people, frozenset(every_name), writing)


def about_nobody(docs: Sequence[str], taken: frozenset[str]) -> list[str]:
    """The documents that name no person of the splits."""
    return [d for d in docs if not taken.intersection(re.findall(r"\w+", d))]


def tokenizer_texts(w: World, seed: int) -> list[str]:
    """What the tokenizer is trained on: the template, one correct episode per real question and three made-up
    people per training person with their passages (so cities seen often become whole tokens, as in a real BPE).

    No name of any split, and no passage about one, is in it: a training name seen dozens of times became one
    token while a held-out name split into about three, so RL on the training people taught a one-token copy that
    held-out questions never use. A real question's search can retrieve a training person's passage (the training
    index holds them; development and held-out people are in no index training reads), so those are left out of its
    episode here."""
    rng = random.Random(seed)
    texts = [w.template] * 20
    stand_ins = [made_up(rng, w.taken) for _ in range(3 * len(w.people))]
    real = [(q, about_nobody(docs, w.taken)) for q, docs in w.real]
    for q, docs in [*real, *stand_ins]:
        messages = trajectory("correct", w.prompt(q.question, False), q, docs, rng, EOS, 0.5, w.writing)
        texts.append("".join(text for text, _ in segments(messages)))
    for line in (EXAMPLES / "mini_corpus.jsonl").open(encoding="utf-8"):
        texts.append(json.loads(line)["text"])
    texts += [p for _, docs in stand_ins[: len(w.people)] for p in docs]
    return texts


def build(
    out: Path,
    template: str,
    retrieve: Retrieve,
    recipe: Recipe,
    log: Callable[[str], None] = print,
    writing: Writing = WRITINGS["r1-searcher"],
) -> dict[str, Any]:
    """Writes the warm start (a Hugging Face folder) in `writing`'s protocol to `out`; returns its record (training
    and probe)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    w = world(template, retrieve, writing)
    build_policy(out, tokenizer_texts(w, recipe.seed), recipe.seed)
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    log(f"[warm start] {sum(p.numel() for p in model.parameters())} parameters, {recipe.steps} supervised steps")
    trained = supervise.train(model, tokenizer, w, recipe, log)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # The development people: the held-out ones are for the learning reports alone.
    dev = fictional_people("dev")
    figures = probe(model, tokenizer, template, dev, samples=4, seed=recipe.seed + 1234, writing=writing)
    return {"recipe": {"seed": recipe.seed, "lr": recipe.lr, "warmup": recipe.warmup,
                       "min_lr_frac": recipe.min_lr_frac, "micro_batch": recipe.micro_batch},
            **trained, "probe": figures}  # fmt: skip
