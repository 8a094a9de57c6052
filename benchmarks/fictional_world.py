"""Writes the bundled fictional world (`examples/fictional/`): people who exist nowhere else, each with a
birthplace named only in their passages, so a question about them can be answered only from what search
returns. Stage 2's learning run trains on it: the EM a policy gains there is reading, not recall.

    python -m benchmarks.fictional_world [--people 300] [--heldout 100] [--seed 7] [--out examples/fictional]

Each person has three passages (birthplace; trade and instrument; a habit); only the first names a city.
`train.jsonl` and `heldout.jsonl` hold disjoint people's questions ("In which city was X born?").
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kl", "st", "th"]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
CODAS = ["", "n", "r", "s", "l", "th", "x", "nd", "rk"]
CITIES = [
    "Quarn", "Velm", "Ostrid", "Paxel", "Dunmere", "Harrow", "Lisk", "Brennet", "Cald", "Fenwick", "Morrow",
    "Tessaly", "Ulm", "Varn", "Yorrel", "Zell", "Ambry", "Corvel", "Essing", "Galt",
]  # fmt: skip
TRADES = ["potter", "weaver", "glassmaker", "carpenter", "baker", "cartographer", "tailor", "smith", "brewer", "mason"]
INSTRUMENTS = ["lute", "fiddle", "drum", "harp", "flute", "horn", "zither", "bagpipe"]
HABITS = [
    "walks along the river every morning",
    "keeps a large collection of old maps",
    "grows tomatoes on the roof",
    "writes letters to distant friends",
    "feeds the pigeons in the square",
    "repairs clocks for the neighbours",
]


def syllable(rng: random.Random) -> str:
    return rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)


def names(rng: random.Random, count: int) -> list[str]:
    """`count` made-up names of two syllables, none a city's."""
    found: list[str] = []
    while len(found) < count:
        word = (syllable(rng) + syllable(rng)).capitalize()
        if word not in found and word not in CITIES:
            found.append(word)
    return found


def world(people: int, seed: int) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    # One made-up word a person, recurring in their passages often enough to be a token or two of a small
    # tokenizer: a small policy can copy it into a query, and search finds that person's passages by it.
    people_names = names(rng, people)
    passages, questions = [], []
    for i in range(people):
        who = people_names[i]
        city, trade, instrument, habit = (rng.choice(CITIES), rng.choice(TRADES), rng.choice(INSTRUMENTS),
                                          rng.choice(HABITS))  # fmt: skip
        texts = [
            f"{who} was born in {city}, where {who} spent a quiet childhood.",
            f"{who} works as a {trade} and plays the {instrument} in the evenings.",
            f"{who} {habit} and is liked by everyone who knows {who}.",
        ]
        passages += [{"id": f"fict-{i}-{j}", "title": who, "text": t} for j, t in enumerate(texts)]
        questions.append({"question": f"In which city was {who} born?", "answer": city, "person": who})
    return passages, questions


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fictional_world", description=__doc__.splitlines()[0])
    p.add_argument("--people", type=int, default=300)
    p.add_argument("--heldout", type=int, default=100, help="people whose questions only evaluation sees")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", type=Path, default=Path("examples/fictional"))
    args = p.parse_args(argv)
    passages, questions = world(args.people, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    write = lambda name, rows: (args.out / name).write_text("".join(json.dumps(r) + "\n" for r in rows))  # noqa: E731
    write("corpus.jsonl", passages)
    write("train.jsonl", questions[args.heldout :])
    write("heldout.jsonl", questions[: args.heldout])
    print(f"{len(passages)} passages, {len(questions) - args.heldout} training and {args.heldout} held-out questions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
