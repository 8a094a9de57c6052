"""The tiny policy's warm start: the shipped one is built from today's inputs and is the files built (else it is
refused), it copies as the issue asks (a real probe of the shipped weights on the development people), no person
of a split reaches its tokenizer, and the curriculum's episodes are what they claim."""

from __future__ import annotations

import json
import random
import re
import shutil

import pytest

from searchrl.protocols import search_r1
from searchrl.protocols.r1_searcher import BEGIN_DOCS, BEGIN_QUERY, END_QUERY, extract_answer
from searchrl.qa_data.fictional import CITIES, SPLITS
from searchrl.rehearsal import warm_start
from searchrl.reward.scoring import score_solution
from searchrl.reward.spec import RewardSpec
from searchrl.tiny_policy import mixture, supervise
from searchrl.tiny_policy.build import fictional_people
from searchrl.tiny_policy.curriculum import EOS, Phase, Recipe, World, episode, made_up
from searchrl.tiny_policy.mixture import Question
from searchrl.tiny_policy.probe import first_segment, probe
from searchrl.tiny_policy.writing import WRITINGS, Writing

SEARCH_R1 = WRITINGS["search-r1"]

TEMPLATE = "Solve it with search.\n\nUser:{question}\nAssistant: <think>"


def small_world(writing: Writing = WRITINGS["r1-searcher"]) -> World:
    real = [(Question("Who wrote Hamlet?", "Shakespeare", "wrote Hamlet"), ["Title: Hamlet Text: by Shakespeare"])]
    people = fictional_people("train")
    taken = {q.query for split in SPLITS for q, _ in fictional_people(split)}
    template = TEMPLATE if writing.PROTOCOL == "r1-searcher" else search_r1.PROMPT
    return World(template, real, people, frozenset(taken), writing)


@pytest.mark.parametrize("protocol", sorted(warm_start.SPEAKERS))
def test_shipped_warm_start_is_built_from_todays_inputs_and_is_the_files_built(protocol):
    state, shipped = warm_start.verify(protocol), warm_start.speaker(protocol).shipped
    fix = f"{warm_start.rebuild_command(protocol)}, then commit {shipped}"
    assert state["problem"] is None, f"{state['problem']}: {fix}"
    assert warm_start.ensure(protocol) == shipped
    assert (shipped / "model.safetensors").stat().st_size < 4 * 2**20


def test_the_warm_starts_differ_by_protocol_and_other_protocols_start_from_r1_searchers():
    data = {p: warm_start.inputs(0, p)["data"] for p in warm_start.SPEAKERS}
    assert len(set(data.values())) == len(data)
    assert warm_start.speaker("rag-r1") == warm_start.speaker("router-r1") == warm_start.SPEAKERS["r1-searcher"]
    assert warm_start.base_template("search-r1") == search_r1.PROMPT


def test_search_r1s_shipped_warm_start_speaks_its_tags_and_copies_sometimes():
    """Sampled here from the shipped weights, written in Search-R1's tags: it searches in most episodes, its query
    names the person, and its answer follows the documents sometimes (stage 1 and 2 have something to learn)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shipped = warm_start.speaker("search-r1").shipped
    model = AutoModelForCausalLM.from_pretrained(shipped)
    tokenizer = AutoTokenizer.from_pretrained(shipped)
    template = warm_start.base_template("search-r1")
    got = probe(model, tokenizer, template, fictional_people("dev"), samples=2, seed=7, writing=SEARCH_R1)
    assert got["episodes"] == 200 and got["search_rate"] > 0.5, got
    assert got["names_rate"] >= 0.6 and 0.05 <= got["doc_city"] <= 0.6, got


STAGE1_IN_SEARCH_R1 = RewardSpec(
    answer_weight=0.0, search_weight=0.5, format_weight=0.5, violation_penalty=0.0, protocol="search-r1"
)
# Each kind's worth under stage 1's reward in Search-R1's tags (searchrl/tiny_policy/writing.py's table).
SEARCH_R1_KINDS = {"correct": 1.0, "no_search": 0.5, "think_left_open": 0.5, "two_answers": 0.5, "no_answer": 0.5,
                   "query_left_open": 0.0}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(SEARCH_R1_KINDS))
def test_search_r1_curriculum_kinds_are_worth_what_its_table_says(kind):
    """Every kind of the mixture written in Search-R1's tags, scored by stage 1's reward in that protocol as the
    environment leaves it (generation stops at `</answer>`, so no EOS follows an answer)."""
    w = small_world(SEARCH_R1)
    q, docs = w.people[0]
    messages = mixture.trajectory(kind, w.prompt(q.question, False), q, docs, random.Random(0), EOS, 1.0, SEARCH_R1)
    solution = "".join(m["content"] for m in messages[1:]).removesuffix(EOS)
    searched = int(search_r1.DOCUMENTS_OPEN in solution)
    got = score_solution(solution, [q.answer], STAGE1_IN_SEARCH_R1, {"num_searches": searched})
    assert got.reward == SEARCH_R1_KINDS[kind], (kind, solution, got.logs)
    if searched:
        assert SEARCH_R1.query(messages[1]["content"]) == q.query


def test_search_r1_documents_are_the_environments_block(mini_index):
    """The curriculum's documents, from passages as the warm start's retriever gives them, are the block the
    environment appends after the same search (Doc i(Title: t) lines in <information>)."""
    import asyncio

    from searchrl.search.base import r1_text
    from searchrl.search.local_faiss import LocalFaissBackend

    backend = LocalFaissBackend(mini_index)
    for hits in asyncio.run(backend.search(["Charles Darwin", "Voyager 2 launch", "Fort Hood"], 3)):
        search = SEARCH_R1.search(" Let me search.", "q")
        assert SEARCH_R1.documents([r1_text(p) for p in hits], after=search) == search_r1.render_documents(hits)


def test_shipped_warm_start_copies_sometimes_on_development_people():
    """Sampled here from the shipped weights (not read from build.json): the query names the person in most
    searches (0.87 in build.json), the answer is the documents' city sometimes, and another person's documents
    do not yield the asked person's city beyond chance."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(warm_start.SHIPPED)
    tokenizer = AutoTokenizer.from_pretrained(warm_start.SHIPPED)
    template = warm_start.base_template()
    got = probe(model, tokenizer, template, fictional_people("dev"), samples=3, seed=7)
    assert got["episodes"] == 300 and got["search_rate"] > 0.5, got
    assert got["names_rate"] >= 0.6, got
    assert 0.07 <= got["doc_city"] <= 0.5, got
    assert got["swapped_gold"] <= 0.12, got


def name_lengths(tokenizer) -> dict[str, list[int]]:
    """How many tokens each training and held-out name is, as it stands in a query (after a space)."""
    return {
        split: [len(tokenizer.tokenize(" " + q.query)) for q, _ in fictional_people(split)]
        for split in ("train", "heldout")
    }


def names_problems(lengths: dict[str, list[int]]) -> list[str]:
    """A held-out name the tokenizer made one token was seen in its training text; a gap between the splits' mean
    lengths means RL on the training people teaches a copy that held-out names do not use."""
    problems = [f"{n} held-out names are one token" for n in [sum(x == 1 for x in lengths["heldout"])] if n]
    means = {split: sum(x) / len(x) for split, x in lengths.items()}
    if abs(means["train"] - means["heldout"]) > 0.2:
        problems.append(f"mean tokens per name differ by more than 0.2: {means}")
    return problems


@pytest.mark.parametrize("protocol", sorted(warm_start.SPEAKERS))
def test_held_out_names_are_as_new_to_the_tokenizer_as_training_names(protocol):
    """Every held-out name tokenized by the shipped tokenizer: none is one token, and the splits' mean lengths
    differ by at most 0.2. Cities stay whole tokens. (The tokenizer shipped before the three splits failed this:
    7 held-out names were single tokens.)"""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(warm_start.speaker(protocol).shipped)
    lengths = name_lengths(tokenizer)
    assert names_problems(lengths) == []
    assert len(lengths["heldout"]) == 100 and min(sum(x) / len(x) for x in lengths.values()) > 2.5
    assert all(len(tokenizer.tokenize(" " + city)) == 1 for city in CITIES)


def test_the_names_check_flags_a_tokenizer_that_saw_held_out_names(tmp_path):
    from transformers import AutoTokenizer

    from searchrl.tiny_policy.model import build_policy

    heldout = [d for _, docs in fictional_people("heldout") for d in docs]
    build_policy(tmp_path, [TEMPLATE, *heldout * 20], seed=0)
    problems = names_problems(name_lengths(AutoTokenizer.from_pretrained(tmp_path)))
    assert any("held-out names are one token" in p for p in problems), problems


def test_no_person_of_a_split_nor_a_passage_about_one_enters_the_tokenizers_text():
    """A real question's search retrieves fictional passages too (the rehearsal index holds both): those are left
    out of what the tokenizer is trained on, and no split's name is in it."""
    from searchrl.tiny_policy.build import tokenizer_texts

    w = small_world()
    (dev_q, dev_docs), (held_q, held_docs) = fictional_people("dev")[0], fictional_people("heldout")[0]
    real = [(Question("Who wrote Hamlet?", "Shakespeare", "wrote Hamlet"),
             ["Title: Hamlet Text: by Shakespeare", dev_docs[0], held_docs[1]])]  # fmt: skip
    w = World(w.template, real, w.people, w.taken, w.writing)
    words = set(re.findall(r"\w+", " ".join(tokenizer_texts(w, seed=0))))
    assert "Shakespeare" in words and not words & w.taken
    assert dev_q.query in w.taken and held_q.query in w.taken


def test_made_up_people_never_take_a_known_name_and_their_passages_name_their_city():
    w = small_world()
    rng = random.Random(0)
    for _ in range(300):
        q, docs = made_up(rng, w.taken)
        assert q.query not in w.taken and q.query not in CITIES
        assert sum(q.answer in d for d in docs) >= 1 and all(q.query in d for d in docs)


def test_short_phase_copies_name_and_city_without_the_instruction():
    w, rng = small_world(), random.Random(1)
    phase = Phase(1, 1, short=True, copy_rate=1.0, real=0.0, trained_people=0.3)
    for _ in range(50):
        segs = episode(w, phase, rng)
        prompt, (search, trained), (docs, docs_trained), (tail, _) = segs[0][0], segs[1], segs[2], segs[3]
        assert prompt.startswith("User:") and "Solve it" not in prompt and not segs[0][1]
        person = prompt.split("was ")[1].split(" born")[0]
        assert trained and f"{BEGIN_QUERY} {person} {END_QUERY}" in search
        assert BEGIN_DOCS in docs and not docs_trained
        assert f"{extract_answer(tail)} spent" in docs or f"born in {extract_answer(tail)}," in docs


def test_copy_rate_sets_how_often_the_answer_is_the_documents_city():
    w, rng = small_world(), random.Random(2)
    phase = Phase(1, 1, short=False, copy_rate=0.2, real=0.0, trained_people=0.0)
    copied = answered = 0
    for _ in range(600):
        segs = episode(w, phase, rng)
        text = "".join(t for t, _ in segs)
        answer = extract_answer(text)
        if answer is None or BEGIN_DOCS not in text or text.count("<answer>") != 1:
            continue
        answered += 1
        copied += f"born in {answer}," in text
    assert answered > 100 and 0.12 < copied / answered < 0.3


def test_supervised_steps_lower_the_loss_on_trained_segments_only(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from searchrl.tiny_policy.model import build_policy

    w = small_world()
    texts = [TEMPLATE] + [d for _, docs in w.people for d in docs]
    build_policy(tmp_path, texts, seed=0)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    recipe = Recipe(lr=3e-3, warmup=2, phases=(Phase(12, 8, short=True, copy_rate=1.0, real=0.0),))
    result = supervise.train(model, tokenizer, w, recipe, log=lambda m: None)
    assert result["steps"] == 12 and result["phases"][0]["loss"] < 6.0
    segs = episode(w, recipe.phases[0], random.Random(3))
    ((ids, mask),) = supervise.encode(tokenizer, [segs])
    sizes = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text, _ in segs]
    assert mask == [trained for (_, trained), n in zip(segs, sizes, strict=True) for _ in range(n)]
    assert not mask[0] and any(mask) and len(ids) == len(mask)


@pytest.mark.parametrize(
    ("generated", "kept"),
    [
        (f" Let me. {BEGIN_QUERY} Zell {END_QUERY}\n\nmore", f" Let me. {BEGIN_QUERY} Zell {END_QUERY}\n\n"),
        (" I know. </think> <answer> Ulm </answer></s>junk", " I know. </think> <answer> Ulm </answer>"),
        (" no end", " no end"),
    ],
)
def test_first_segment_stops_where_the_environment_does(generated, kept):
    assert first_segment(generated) == kept


def test_check_command_reports_fresh(capsys):
    assert warm_start.main(["check"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["protocol"] for r in lines} == set(warm_start.SPEAKERS) and all(r["fresh"] for r in lines)


@pytest.mark.slow
def test_rebuilt_warm_start_copies_as_well_as_the_shipped_one(tmp_path):
    """Rebuilds the warm start from its inputs (about 15 min on 2 cores) and compares what the probe measures."""
    from searchrl.rehearsal.inputs import rehearsal_index

    rebuilt = warm_start.build_folder(tmp_path / "warm_start", rehearsal_index(), seed=0, log=lambda m: None)
    shipped = warm_start.shipped_record()
    assert rebuilt["inputs_hash"] == shipped["inputs_hash"]
    for key in ("names_rate", "doc_city"):
        assert abs(rebuilt["probe"][key] - shipped["probe"][key]) <= 0.15, (key, rebuilt["probe"], shipped["probe"])
    assert rebuilt["probe"]["names_rate"] >= 0.5 and 0.1 <= rebuilt["probe"]["doc_city"] <= 0.4


def shipped_copy(tmp_path, monkeypatch, protocol: str = "r1-searcher"):
    """The protocol's shipped warm start copied to `tmp_path`, and `warm_start` pointed at the copy."""
    who = warm_start.SPEAKERS[protocol]
    copy = tmp_path / who.shipped.name
    shutil.copytree(who.shipped, copy)
    monkeypatch.setitem(warm_start.SPEAKERS, protocol, type(who)(**{**vars(who), "shipped": copy}))
    return copy


def test_altered_weights_or_tokenizer_are_refused_with_the_rebuild_command(tmp_path, monkeypatch):
    copy = shipped_copy(tmp_path, monkeypatch)
    assert warm_start.ensure() == copy
    weights = copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(warm_start.WarmStartError, match="altered.*python -m searchrl.rehearsal.warm_start build"):
        warm_start.ensure()
    weights.write_bytes(data)
    assert warm_start.ensure() == copy
    with (copy / "tokenizer.json").open("a") as tokenizer:
        tokenizer.write(" ")
    with pytest.raises(warm_start.WarmStartError, match="altered"):
        warm_start.ensure()


def test_a_changed_library_version_or_encoder_makes_it_stale_naming_the_part(tmp_path, monkeypatch):
    """The inputs cover the libraries that change the result and the encoder's own files; a stale warm start is
    refused, naming its protocol's rebuild command and the part of its inputs that changed."""
    shipped_copy(tmp_path, monkeypatch, "search-r1")
    today = warm_start.inputs(0, "search-r1")
    real_version = warm_start.version
    monkeypatch.setattr(warm_start, "version", lambda name: "9.9.9" if name == "tokenizers" else real_version(name))
    assert warm_start.inputs(0, "search-r1")["libraries"] != today["libraries"]
    with pytest.raises(
        warm_start.WarmStartError, match="stale.*changed since: a library version;.*--protocol search-r1"
    ):
        warm_start.ensure("search-r1")
    monkeypatch.setattr(warm_start, "version", real_version)
    assert warm_start.inputs(0, "search-r1") == today
    encoder = tmp_path / "encoder"
    shutil.copytree(warm_start.encoder_files(), encoder)
    monkeypatch.setattr(warm_start, "encoder_files", lambda: encoder)
    assert warm_start.inputs(0, "search-r1") == today
    (encoder / "config.json").write_text((encoder / "config.json").read_text() + " ")
    assert warm_start.inputs(0, "search-r1")["encoder"] != today["encoder"]
    with pytest.raises(warm_start.WarmStartError, match="changed since: the encoder's files"):
        warm_start.ensure("search-r1")


def test_the_data_hash_follows_every_episode_and_text():
    """Two worlds with the same data hash alike; one document changed in one real question's episode, one more
    training step, or another seed changes it."""
    from dataclasses import replace

    from searchrl.tiny_policy.key import data_hash

    w = small_world()
    recipe = Recipe(phases=(Phase(3, 4, short=False, copy_rate=0.5, real=0.5),))
    assert data_hash(w, recipe) == data_hash(small_world(), recipe)
    (q, docs) = w.real[0]
    other = World(w.template, [(q, [docs[0] + " Also a play."])], w.people, w.taken, w.writing)
    assert data_hash(other, recipe) != data_hash(w, recipe)
    assert data_hash(w, replace(recipe, seed=1)) != data_hash(w, recipe)
    assert data_hash(w, replace(recipe, phases=(replace(recipe.phases[0], steps=4),))) != data_hash(w, recipe)


SOURCE = '''def step(x, lr):
    """Adds."""
    # a comment
    return x + lr * SCALE
'''


def test_code_shape_ignores_comments_docstrings_and_place_but_not_a_statement():
    """Re-commented, re-documented, or indented as a method of another module (how inspect returns it): the same
    shape; one operator changed: another."""
    from searchrl.tiny_policy.key import code_shape

    same = [
        SOURCE.replace("# a comment", "# another comment, longer"),
        SOURCE.replace('"""Adds."""', '"""Adds, said otherwise\n    over two lines."""'),
        "".join("    " + line + "\n" for line in SOURCE.splitlines()),
    ]
    assert {code_shape(text) for text in same} == {code_shape(SOURCE)}
    assert code_shape(SOURCE.replace("x + lr", "x - lr")) != code_shape(SOURCE)


def test_the_training_hash_reads_the_policys_shape(monkeypatch):
    """A plain value a training function reads (the policy's vocabulary size) is part of what it hashes."""
    from searchrl.tiny_policy import key, model

    today = key.training_hash()
    monkeypatch.setattr(model, "POLICY_VOCAB", model.POLICY_VOCAB + 1)
    assert key.training_hash() != today


def tree_copy(tmp_path):
    """The checkout's tracked files copied to `tmp_path`, with the rehearsal index it already built (a moved file
    must not rebuild it)."""
    import subprocess

    from searchrl.paths import ROOT
    from searchrl.rehearsal.inputs import REHEARSAL_DIR, rehearsal_index

    rehearsal_index()
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    copy = tmp_path / "tree"
    for name in files.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    shutil.copytree(REHEARSAL_DIR / "index", copy / "runs/rehearse/index")
    shutil.copy2(REHEARSAL_DIR / "corpus.jsonl", copy / "runs/rehearse/corpus.jsonl")
    return copy


def check_in(tree) -> dict:
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "searchrl.rehearsal.warm_start", "check", "--protocol", "r1-searcher"]
    done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree)})
    assert done.stdout.strip(), done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def move(tree, old: str, new: str) -> None:
    """Moves module `old` to `new` (dotted names) in `tree`, and every import of it."""
    src, dst = (tree / (name.replace(".", "/") + ".py") for name in (old, new))
    dst.parent.mkdir(parents=True, exist_ok=True)
    src.rename(dst)
    for path in tree.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if old in text:
            path.write_text(text.replace(old, new), encoding="utf-8")


def test_moved_and_recommented_code_leaves_it_fresh_and_one_changed_episode_makes_it_stale(tmp_path):
    """In a copy of the tree: the index builder and the encoder re-commented, the local FAISS backend and the probe
    moved to other modules, the training loop's docstring rewritten: the warm start is still fresh. Then one opening
    sentence of the curriculum changed: stale, naming the data."""
    tree = tree_copy(tmp_path)
    for name in (
        "searchrl/search/index/build.py",
        "searchrl/search/encode/encoder.py",
        "searchrl/tiny_policy/supervise.py",
    ):
        path = tree / name
        path.write_text("# re-commented\n" + path.read_text(encoding="utf-8").replace("\n\n\n", "\n\n\n# moved on\n"))
    supervise_py = tree / "searchrl/tiny_policy/supervise.py"
    text = supervise_py.read_text(encoding="utf-8")
    supervise_py.write_text(text.replace("Runs the recipe's phases on", "Trains, phase by phase,"), encoding="utf-8")
    move(tree, "searchrl.search.local_faiss", "searchrl.search.local_faiss_moved")
    move(tree, "searchrl.tiny_policy.probe", "searchrl.tiny_policy.probing")
    state = check_in(tree)
    assert state["fresh"] and state["inputs"] == warm_start.verify()["inputs"], state
    mixture_py = tree / "searchrl/tiny_policy/mixture.py"
    text = mixture_py.read_text(encoding="utf-8")
    mixture_py.write_text(text.replace('" Let me search."', '" Let me look."'), encoding="utf-8")
    state = check_in(tree)
    assert not state["fresh"] and "changed since: the curriculum's data" in state["problem"], state


def names_in(texts, names: frozenset[str]) -> set[str]:
    """The names of `names` standing as words in any of `texts` (every fictional name is one word)."""
    found: set[str] = set()
    for text in texts:
        found |= names.intersection(re.findall(r"\w+", text))
    return found


def test_no_development_or_held_out_person_in_any_training_text():
    """Both warm starts' full curriculum (tokenizer texts and all 147,200 episodes, documents included, as today's
    training index returns them), the SFT rehearsal's data, both stages' RL prompts and every passage the training
    index holds: no name of a development or held-out person. The evaluation index holds them."""
    from searchrl.rehearsal.inputs import (
        EVERYONE,
        REHEARSAL_DIR,
        passage_retriever,
        people_of,
        rehearsal_corpus,
        rehearsal_index,
        stage_questions,
    )
    from searchrl.rehearsal.sft import sft_rows
    from searchrl.tiny_policy.build import world
    from searchrl.tiny_policy.key import curriculum

    others = people_of(("dev", "heldout"))
    assert len(others) == 200
    index = rehearsal_index()
    for protocol in warm_start.SPEAKERS:
        w = world(warm_start.base_template(protocol), passage_retriever(index), WRITINGS[protocol])
        assert names_in(curriculum(w, Recipe()), others) == set(), protocol
    sft = [m["content"] for row in sft_rows(index) for m in row["messages"]]
    prompts = [q["question"] for stage in ("stage1_format", "stage2_answer") for q in stage_questions(stage, 600)]
    training = rehearsal_corpus(REHEARSAL_DIR).read_text(encoding="utf-8").splitlines()
    assert names_in(sft, others) == names_in(prompts, others) == names_in(training, others) == set()
    assert (
        names_in(rehearsal_corpus(REHEARSAL_DIR, EVERYONE).read_text(encoding="utf-8").splitlines(), others) == others
    )


def test_the_names_check_finds_a_planted_held_out_person():
    """One held-out person's passage among a real question's documents: the curriculum check names them."""
    from searchrl.rehearsal.inputs import people_of
    from searchrl.tiny_policy.key import curriculum

    w = small_world()
    held_q, held_docs = fictional_people("heldout")[5]
    (q, docs) = w.real[0]
    planted = World(w.template, [(q, [*docs, held_docs[0]])], w.people, w.taken, w.writing)
    recipe = Recipe(phases=(Phase(20, 8, short=False, copy_rate=0.5, real=0.5),))
    others = people_of(("dev", "heldout"))
    assert names_in(curriculum(w, recipe), others) == set()
    assert names_in(curriculum(planted, recipe), others) == {held_q.query}
