"""Writes the bundled fictional world (`examples/fictional/`): people who exist nowhere else, each with a
birthplace named only in their passages, so a question about them can be answered only from what search
returns. Stage 2's learning run trains on it: the EM a policy gains there is reading, not recall.

    python -m benchmarks.fictional_world [--people 400] [--dev 100] [--heldout 100] [--seed 2026] [--split-seed 0]
        [--out examples/fictional]

Each person has three passages (birthplace; trade and instrument; a habit); only the first names a city. The
people are drawn by `--seed` and dealt into three disjoint splits by `--split-seed`: `train.jsonl` (what RL and
the warm start train on), `dev.jsonl` (for tuning a recipe and any probing) and `heldout.jsonl` (for reports
alone). `world.json` records both seeds and the split sizes; benchmarks/learning.py copies it into its report.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from searchrl.qa_data.fictional import SPLITS, names, person


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


def deal(questions: list[dict], sizes: dict[str, int], split_seed: int) -> dict[str, list[dict]]:
    """The people dealt into the splits by `split_seed`, each split in the world's order."""
    order = list(range(len(questions)))
    random.Random(split_seed).shuffle(order)
    splits, start = {}, 0
    for split in SPLITS:
        chosen = sorted(order[start : start + sizes[split]])
        splits[split] = [questions[i] for i in chosen]
        start += sizes[split]
    return splits


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fictional_world", description=__doc__.splitlines()[0])
    p.add_argument("--people", type=int, default=400)
    p.add_argument("--dev", type=int, default=100, help="people for tuning recipes and probes")
    p.add_argument("--heldout", type=int, default=100, help="people whose questions only reports see")
    p.add_argument("--seed", type=int, default=2026, help="draws the people (names, cities, passages)")
    p.add_argument("--split-seed", type=int, default=0, help="deals the people into the three splits")
    p.add_argument("--out", type=Path, default=Path("examples/fictional"))
    args = p.parse_args(argv)
    train = args.people - args.dev - args.heldout
    if train <= 0:
        p.error(f"--people {args.people} leaves no training people after --dev and --heldout")
    passages, questions = world(args.people, args.seed)
    sizes = {"train": train, "dev": args.dev, "heldout": args.heldout}
    splits = deal(questions, sizes, args.split_seed)
    args.out.mkdir(parents=True, exist_ok=True)
    write = lambda name, rows: (args.out / name).write_text("".join(json.dumps(r) + "\n" for r in rows))  # noqa: E731
    write("corpus.jsonl", passages)
    for split, rows in splits.items():
        write(f"{split}.jsonl", rows)
    record = {"seed": args.seed, "split_seed": args.split_seed, "people": args.people, "splits": sizes}
    (args.out / "world.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"{len(passages)} passages; " + ", ".join(f"{len(r)} {s}" for s, r in splits.items()) + " questions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
