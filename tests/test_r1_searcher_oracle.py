"""The r1-searcher protocol, its reward presets and its settings against what R1-Searcher's own code returned on the
same inputs (recorded from RUCAIBox/R1-Searcher by tests/fixtures/r1_searcher_oracle/record.py, the commit in each
record):
- `MathRuleProxy.get_reward` of its three reward servers: the presets give its number on every recorded trajectory
  but the ones named in KNOWN_*, which must still differ (so each list stays what docs/REWARDS.md says);
- `preprocess_data`: a model config holding its text renders its prompt;
- one turn of `_generate_vllm_with_retrieve`: the query read and the documents block appended;
- the values its rollout, evaluation and retriever code run with."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest

from searchrl.protocols import r1_searcher
from searchrl.reward.scoring import score_solution
from searchrl.reward.spec import PRESETS, RewardSpec
from searchrl.rollout.environment import Episode, SearchEnvironment
from searchrl.search.base import Passage
from searchrl.search.index.corpus import CorpusReport
from searchrl.search.index.importer import LAYOUT_MAX_LENGTH, r1_searcher_records
from searchrl.stage.config import EpisodeConfig, ModelConfig, load_stage
from searchrl.stage.templates import render_prompt
from tests.conftest import FIXTURES, ROOT

ORACLE = FIXTURES / "r1_searcher_oracle"


def record(name: str) -> dict[str, Any]:
    return json.loads((ORACLE / name).read_text(encoding="utf-8"))


REWARD, PROMPT, TURN, SETTINGS = (record(f"{n}.json") for n in ("reward", "prompt", "turn", "settings"))

# Its Llama stage-2 server (no preset): F1, minus 1 on its five rules; role words are not among them.
LLAMA_STAGE2 = RewardSpec(
    answer_metric="f1",
    violation_penalty=1.0,
    penalty_rules=("tag_counts", "think", "answer_count", "tags_in_answer", "cjk"),
)
SPECS = {
    "qwen_zero": PRESETS["r1searcher-qwen-stage2"],
    "llama_stage1": PRESETS["r1searcher-llama-stage1"],
    "llama_stage2": LLAMA_STAGE2,
}
# Trajectories the reward scores otherwise, each for the reason docs/REWARDS.md's table gives. Ours forbids any
# query, documents or think tag inside the answer, where its servers look for the two opening tags' names only.
TAGS_IN_ANSWER = {"the bare word end_of_query in the answer", "the only </think> inside the answer"}
KNOWN_REWARD = {
    # Its get_qa scores only what follows the last "\nAssistant: <think>", ours all that follows the prompt.
    "qwen_zero": TAGS_IN_ANSWER | {"the prompt's assistant marker written again"},
    "llama_stage1": set(),
    "llama_stage2": TAGS_IN_ANSWER,
}


def test_the_records_name_their_source():
    for data in (REWARD, PROMPT, TURN, SETTINGS):
        source = data["source"]
        assert source["repository"] == "RUCAIBox/R1-Searcher" and source["licence"] == "MIT"
        assert len(source["commit"]) == 40 and int(source["commit"], 16) >= 0
    assert {s["function"] for s in REWARD["servers"].values()} == {"MathRuleProxy.get_reward"}
    assert len(REWARD["cases"]) >= 150 and len(TURN["cases"]) >= 15


def scored(server: str, case: dict[str, Any]) -> float:
    """Ours on what OpenRLHF sends: the prompt its server splits, then the solution after it."""
    prompt = REWARD["prompts"][server].replace("{question}", REWARD["question"])
    solution = r1_searcher.split_solution(prompt + case["solution"], prompt)
    return score_solution(solution, [case["gold"]], SPECS[server]).reward


@pytest.mark.parametrize("server", ["qwen_zero", "llama_stage1"])
def test_every_recorded_trajectory_scores_as_r1_searchers_reward_server_scored_it(server):
    """Each preset against its server on every trajectory and gold; the known differences must still differ."""
    same, differ = [], []
    for case in REWARD["cases"]:
        (differ if case["what"] in KNOWN_REWARD[server] else same).append(case)
    for case in same:
        assert math.isclose(scored(server, case), case["rewards"][server], abs_tol=1e-9), (case["what"], case["gold"])
    assert all(not math.isclose(scored(server, c), c["rewards"][server]) for c in differ if c["gold"] == "Paris")
    assert len(same) >= 150


def test_its_llama_stage2_reward_is_a_spec_of_the_projects_reward():
    """No preset holds it, but a `reward:` section does: F1, -1 on tag counts, think, answer count, tags in the
    answer and CJK (role words and answer length are not its rules)."""
    for case in REWARD["cases"]:
        recorded = case["rewards"]["llama_stage2"]
        if case["what"] in KNOWN_REWARD["llama_stage2"]:
            assert case["gold"] != "Paris" or not math.isclose(scored("llama_stage2", case), recorded)
        else:
            assert math.isclose(scored("llama_stage2", case), recorded, abs_tol=1e-9), (case["what"], case["gold"])


class Recorder:
    """A tokenizer whose chat template is stood in for as record.py stood it in: the messages kept, a marker out."""

    def __init__(self) -> None:
        self.messages: list[list[dict[str, str]]] = []

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False, **kwargs) -> str:
        assert not tokenize and add_generation_prompt
        self.messages.append(messages)
        return "[CHAT TEMPLATE]"


IDX = "<|idx_prompt_split|>"


@pytest.mark.parametrize("case", PROMPT["training"], ids=[c["question"][:30] for c in PROMPT["training"]])
def test_a_model_config_holding_r1_searchers_prompt_renders_it_as_its_data_loader_does(case):
    """Its base prompt as a `kind: base` template, its system message as a `kind: chat` config's: each renders its
    prompt byte for byte, but for white space around the question, which ours strips."""
    question = case["question"]
    base = case["base"].split(IDX, 1)[1]
    template = base.replace(f"User:{question}\n", "User:{question}\n")
    model = ModelConfig(name="r1", kind="base", model_path="x", template=template)
    ours = render_prompt(model, question)
    assert ours == base if question == question.strip() else ours == base.replace(question, question.strip())
    system = case["chat_messages"][0]["content"]
    chat = ModelConfig(name="r1", kind="chat", model_path="x", system=system, user="{question}")
    recorder = Recorder()
    ours = render_prompt(chat, question, recorder)
    assert ours == case["chat"].split(IDX, 1)[1]
    assert [m["role"] for m in recorder.messages[0]] == [m["role"] for m in case["chat_messages"]]
    assert recorder.messages[0][1]["content"] == question.strip()


QUERY_DIFFERS = {"a quote inside a word", "curly quotes in the query"}
TRAINING_TURNS = [c for c in TURN["cases"] if c["stop_reason"] == r1_searcher.END_QUERY]


def action(case: dict[str, Any]) -> str:
    """The segment as ours receives it: vLLM keeps the stop string here (include_stop_str_in_output)."""
    return case["generated_text"] + (case["stop_reason"] or "")


@pytest.mark.parametrize("case", TRAINING_TURNS, ids=[c["what"] for c in TRAINING_TURNS])
def test_a_segments_query_is_read_as_r1_searchers_rollout_reads_it(case):
    """Whether a segment searches, and what: the same, but for quotes inside a word and curly quotes (ours turns
    both into a space, its code deletes `"` and keeps the curly ones)."""
    r1 = case["training"]
    ours = r1_searcher.search_query(action(case))
    assert (ours is not None) == r1["search"]
    if r1["search"]:
        assert (ours == r1["query"]) != (case["what"].split(";")[0] in QUERY_DIFFERS), (ours, r1["query"])


class Found:
    """A backend that returns the case's passages, so the environment's own rendering is what is compared."""

    def __init__(self, passages: list[Passage]) -> None:
        self.passages = passages

    async def search(self, queries, top_k):
        return [self.passages[:top_k] for _ in queries]

    async def aclose(self):
        pass


def imported(lines: list[str], tmp_path) -> list[Passage]:
    """The lines as a TSV read by `index import --layout r1-searcher`."""
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    records = [r for r, _ in r1_searcher_records(corpus, CorpusReport())]
    return [Passage(r.id, r.title, r.text, 1.0) for r in records]


BLOCK_DIFFERS = {
    "KILT lines (split_kilt_to_100.py)",
    "an abstracts line with three spaces in its text",
    "a line with a byte-order mark before its row",
    "no documents",
}
SEARCHED = [c for c in TRAINING_TURNS if c["training"]["search"]]


@pytest.mark.parametrize("case", SEARCHED, ids=[c["what"] for c in SEARCHED])
def test_an_imported_line_comes_back_in_r1_searchers_documents_block(case, tmp_path):
    """Its corpus lines imported and found, then rendered by the environment after the query: the block it appends
    after `<|end_of_query|>`, byte for byte for its HotpotQA abstracts (its training corpus)."""
    r1 = case["training"]
    before = case["prompt"] + case["generated_text"].strip() + r1_searcher.END_QUERY
    assert r1["context"].startswith(before)
    env = SearchEnvironment(Found(imported(case["retrieve_docs"], tmp_path)), EpisodeConfig(top_k=3))
    out = asyncio.run(env.step(Episode(prompt=case["prompt"], label="x"), action(case)))
    assert (out.feedback == r1["context"][len(before) :]) != (case["what"].split("; ")[1] in BLOCK_DIFFERS)


def stage(name: str):
    return load_stage(ROOT / f"configs/stages/{name}.yaml")


@pytest.mark.parametrize("name", ["stage1_format", "stage2_answer"])
def test_the_stages_turn_is_r1_searchers_rollout_turn(name):
    """Its rollout's stop strings, sampling, segment length and top-k against each stage's."""
    rollout = SETTINGS["training"]
    (sampling,) = rollout["sampling"]
    cfg, _ = stage(name)
    assert cfg.protocol == "r1-searcher" and not cfg.episode.stop_after_answer
    assert r1_searcher.stops(cfg.episode.stop_after_answer) == rollout["stop_tokens"][0]
    assert cfg.openrlhf["rollout.temperature"] == sampling["temperature"]
    assert cfg.openrlhf["rollout.top_p"] == sampling["top_p"]
    assert cfg.episode.max_segment_tokens == sampling["max_tokens"]
    assert [cfg.episode.top_k] == rollout["topk"]


def test_the_search_cap_ends_an_episode_where_r1_searchers_loop_does(tmp_path):
    """Its loop ends every episode still going at t == 8: eight searches, the ninth segment's query unanswered.
    Ours with the stages' max_searches: the same."""
    cap = SETTINGS["training"]["loop"]["ends_at"]
    cfg, _ = stage("stage2_answer")
    assert cfg.episode.max_searches == cap == 8
    env = SearchEnvironment(Found(imported(TURN["cases"][0]["retrieve_docs"], tmp_path)), cfg.episode)
    episode, segment = Episode(prompt="P", label="x"), action(TRAINING_TURNS[0])
    outcomes = [asyncio.run(env.step(episode, segment)) for _ in range(cap + 1)]
    assert [o.done for o in outcomes] == [False] * cap + [True]
    assert episode.num_searches == cap and episode.capped


def test_its_evaluation_top_k_sampling_and_segment_are_ours():
    """eval_search_loacl.py: greedy (its --temp default), top-5, 512 tokens a segment, as `eval local`'s r1-searcher
    defaults (its top_p 0.95 does nothing at temperature 0)."""
    from eval.runner import RunSettings
    from searchrl.protocols import get_protocol

    evaluation = SETTINGS["evaluation"]
    (sampling,) = evaluation["sampling"]
    ours = get_protocol("r1-searcher").EVAL_EPISODE
    assert [ours["top_k"]] == evaluation["topk"] and ours["max_segment_tokens"] == sampling["max_tokens"]
    assert RunSettings.__dataclass_fields__["temperature"].default == evaluation["temp_default"] == 0.0


def test_the_query_instruction_and_lengths_are_r1_searchers_retrievers():
    """FlagModel's query instruction, k 3 and the corpus' 300 tokens. Ours writes a space after the instruction's
    colon, which bge's uncased WordPiece never makes a token: the bundled MiniLM's tokenizer, which splits the same
    way, gives the same ids either way."""
    from tokenizers import Tokenizer

    from searchrl.search.encode.profiles import PROFILES, bundled_model_path

    retriever = SETTINGS["retriever"]
    theirs, ours = retriever["FlagModel"]["query_instruction_for_retrieval"], PROFILES["bge"].query_instruction
    assert ours.rstrip() == theirs and retriever["k_default"] == 3
    assert LAYOUT_MAX_LENGTH["r1-searcher"] == retriever["encode_corpus"]["max_length"]
    tokenizer = Tokenizer.from_file(str(bundled_model_path() / "tokenizer.json"))
    for case in SEARCHED:
        query = case["training"]["query"]
        assert tokenizer.encode(theirs + query).ids == tokenizer.encode(ours + query).ids
    assert tokenizer.encode(theirs + "x").ids != tokenizer.encode(theirs[:-1] + "x").ids  # the check can tell


def test_rewards_md_r1_searcher_table_is_the_parity_rows_and_says_same_only_where_a_test_exists():
    """docs/REWARDS.md's R1-Searcher table is tests/r1_searcher_parity.py rendered; every row that reads "same" names
    tests, and each named test function exists in its file (the suite runs them)."""
    from tests.r1_searcher_parity import ROWS, table
    from tests.search_r1_parity import check_docs_table

    check_docs_table(ROOT / "docs/REWARDS.md", "r1-searcher-parity", ROWS, table())
