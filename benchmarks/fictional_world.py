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

from searchrl.qa_data.fictional import names, person


def world(people: int, seed: int) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    # One made-up word a person, recurring in their passages often enough to be a token or two of a small
    # tokenizer: a small policy can copy it into a query, and search finds that person's passages by it.
    people_names = names(rng, people)
    passages, questions = [], []
    for i in range(people):
        who = person(rng, people_names[i])
        passages += [{"id": f"fict-{i}-{j}", "title": who.name, "text": t} for j, t in enumerate(who.passages)]
        questions.append({"question": who.question, "answer": who.city, "person": who.name})
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
