"""The bundled fictional world: three disjoint splits of people (train, dev, held-out), which the seeds recorded
in world.json make again byte for byte."""

from __future__ import annotations

import json

from benchmarks import fictional_world
from searchrl.paths import EXAMPLES
from searchrl.qa_data.fictional import SPLITS

FICTIONAL = EXAMPLES / "fictional"


def test_the_recorded_seeds_make_the_bundled_world(tmp_path):
    record = json.loads((FICTIONAL / "world.json").read_text(encoding="utf-8"))
    sizes = record["splits"]
    argv = ["--people", str(record["people"]), "--dev", str(sizes["dev"]), "--heldout", str(sizes["heldout"])]
    argv += ["--seed", str(record["seed"]), "--split-seed", str(record["split_seed"]), "--out", str(tmp_path)]
    assert fictional_world.main(argv) == 0
    for name in ("corpus.jsonl", "world.json", *(f"{split}.jsonl" for split in SPLITS)):
        assert (tmp_path / name).read_bytes() == (FICTIONAL / name).read_bytes(), name


def test_the_splits_are_disjoint_and_every_person_has_passages():
    people = {
        split: {json.loads(line)["person"] for line in (FICTIONAL / f"{split}.jsonl").open(encoding="utf-8")}
        for split in SPLITS
    }
    assert {split: len(names) for split, names in people.items()} == {"train": 200, "dev": 100, "heldout": 100}
    assert sum(len(names) for names in people.values()) == len(set().union(*people.values()))
    titles = {json.loads(line)["title"] for line in (FICTIONAL / "corpus.jsonl").open(encoding="utf-8")}
    assert titles == set().union(*people.values())


def test_another_split_seed_deals_other_people_into_the_held_out_split():
    _, questions = fictional_world.world(40, seed=1)
    sizes = {"train": 20, "dev": 10, "heldout": 10}
    a, b = fictional_world.deal(questions, sizes, 0), fictional_world.deal(questions, sizes, 1)
    assert a != b and a == fictional_world.deal(questions, sizes, 0)
    assert sorted(q["person"] for split in SPLITS for q in a[split]) == sorted(q["person"] for q in questions)
