"""The fictional world's people: made-up names, each with a birthplace named only in their own passages, so a
question about them can be answered only from what search returns. `benchmarks/fictional_world.py` writes the
bundled world (`examples/fictional/`) from it; the tiny policy's copy curriculum draws fresh people from it.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass

ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kl", "st", "th"]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
CODAS = ["", "n", "r", "s", "l", "th", "x", "nd", "rk"]
CITIES = [
    "Quarn", "Velm", "Ostrid", "Paxel", "Dunmere", "Harrow", "Lisk", "Brennet", "Cald", "Fenwick", "Morrow",
    "Tessaly", "Ulm", "Varn", "Yorrel", "Zell", "Ambry", "Corvel", "Essing", "Galt",
]  # fmt: skip
TRADES = ["potter", "weaver", "glassmaker", "carpenter", "baker", "cartographer", "tailor", "smith", "brewer", "mason"]
INSTRUMENTS = ["lute", "fiddle", "drum", "harp", "flute", "horn", "zither", "bagpipe"]
# The fictional people's splits (examples/fictional/<split>.jsonl): what training uses, what tuning and probes
# use, and what reports alone use.
SPLITS = ("train", "dev", "heldout")
HABITS = [
    "walks along the river every morning",
    "keeps a large collection of old maps",
    "grows tomatoes on the roof",
    "writes letters to distant friends",
    "feeds the pigeons in the square",
    "repairs clocks for the neighbours",
]


@dataclass(frozen=True)
class Person:
    name: str
    city: str
    passages: tuple[str, ...]  # birthplace; trade and instrument; a habit: only the first names a city

    @property
    def question(self) -> str:
        return f"In which city was {self.name} born?"


def syllable(rng: random.Random) -> str:
    return rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)


def made_up_name(rng: random.Random, taken: Collection[str] = ()) -> str:
    """A name of two made-up syllables that is neither a city nor in `taken`."""
    while True:
        word = (syllable(rng) + syllable(rng)).capitalize()
        if word not in taken and word not in CITIES:
            return word


def names(rng: random.Random, count: int) -> list[str]:
    """`count` distinct made-up names."""
    found: list[str] = []
    while len(found) < count:
        found.append(made_up_name(rng, found))
    return found


def person(rng: random.Random, name: str) -> Person:
    city, trade, instrument, habit = (rng.choice(CITIES), rng.choice(TRADES), rng.choice(INSTRUMENTS),
                                      rng.choice(HABITS))  # fmt: skip
    texts = (
        f"{name} was born in {city}, where {name} spent a quiet childhood.",
        f"{name} works as a {trade} and plays the {instrument} in the evenings.",
        f"{name} {habit} and is liked by everyone who knows {name}.",
    )
    return Person(name, city, texts)
