"""The rows of docs/REWARDS.md's R1-Searcher table: each mechanism as R1-Searcher's code runs it, as this project runs
it, and the tests that check ours against outputs recorded from its code (tests/fixtures/r1_searcher_oracle/). A row
reads "same" only where it names tests, which must exist (tests/test_r1_searcher_oracle.py checks it and the docs
block); a row without tests reads "different" and says why."""

from __future__ import annotations

from tests.search_r1_parity import Row

ORACLE = "tests/test_r1_searcher_oracle.py"

ROWS = (
    Row(
        "reward, Qwen",
        (
            "`reward_server_qwen_zero.py`: F1 of the last `<answer>` (0 without both answer tags), -2 when the seven "
            "query/documents tag forms are not equally many, `Assistant`/`assistant` is anywhere in the solution, "
            "`</think>` is not there once or `<think>` is, `<answer>`/`</answer>` are not there once each, the answer "
            "holds `begin_of_query`/`begin_of_documents` or more than 10 words, or CJK stands outside documents"
        ),
        "the preset `r1searcher-qwen-stage2`, on the solution after the prompt OpenRLHF sends",
        (f"{ORACLE}::test_every_recorded_trajectory_scores_as_r1_searchers_reward_server_scored_it",),
        "164 of 176 recorded outputs (44 trajectories, 4 golds each), exactly (160 before a text opening with "
        "`ssistant` no longer hid a later `assistant` from `role_leakage`)",
        (
            "ours also forbids the end tags, `<think>` and `</think>` inside the answer (a bare `end_of_query` or the "
            "only `</think>` there is -2 here, not there); its `get_qa` scores what follows the last "
            "`\\nAssistant: <think>`, so a policy that writes the marker again hides its earlier text"
        ),
    ),
    Row(
        "reward, Llama stage 1",
        (
            "`reward_server_llama_stage1.py`: cover-EM as +1/-1 (-1 without both answer tags), +0.5 when the seven "
            "tag forms are equally many and at least one, +0.5 for no `<think>`, one `</think>`, one `<answer>` and "
            "one `</answer>`"
        ),
        "the preset `r1searcher-llama-stage1`",
        (f"{ORACLE}::test_every_recorded_trajectory_scores_as_r1_searchers_reward_server_scored_it",),
        "176 of 176 recorded outputs, exactly",
        None,
    ),
    Row(
        "reward, Llama stage 2",
        (
            "`reward_server_llama_stage2.py`: F1, -1 on unequal tag forms, the think and answer counts, a "
            "`begin_of_*` tag name in the answer, CJK outside documents"
        ),
        (
            "no preset; a `reward:` section of `answer_metric: f1`, `violation_penalty: 1`, `penalty_rules: "
            "[tag_counts, think, answer_count, tags_in_answer, cjk]` gives its numbers"
        ),
        (f"{ORACLE}::test_its_llama_stage2_reward_is_a_spec_of_the_projects_reward",),
        "168 of 176 recorded outputs, exactly",
        "the tags inside the answer, as in its Qwen reward",
    ),
    Row(
        "prompt frame",
        (
            "`preprocess_data`: a base model (its Qwen script) gets the instruction, `\\n\\nUser:{question}"
            "\\nAssistant: <think>`; a chat model (its Llama scripts' `--apply_chat_template`) a system message and "
            "the question as the user turn through the chat template, then `<think>`"
        ),
        (
            "a `kind: base` model config's `template`; a `kind: chat` one's `system`, `user: \"{question}\"` and "
            '`assistant_prefix: "<think>"`: a config holding its text renders its prompt byte for byte'
        ),
        (f"{ORACLE}::test_a_model_config_holding_r1_searchers_prompt_renders_it_as_its_data_loader_does",),
        "3 questions of its data, base and chat",
        "ours strips white space around the question (its stage-2 data holds questions that end in a space)",
    ),
    Row(
        "prompt instruction",
        (
            "training: `preprocess_data`'s instruction (keywords, `A query must involve only a single triple`); "
            "evaluation: `process_text`'s `v0` (`--prompt_type v0`), worded otherwise"
        ),
        "`configs/models/*.yaml`: the project's own wording of the same tags and rules, for base and chat models",
        (),
        (
            "the project writes its own instruction and does not ship R1-Searcher's; a model config holding its text "
            "reproduces its prompt (the row above). Its texts are recorded in `prompt.json` (3 training questions, "
            "base and chat; 12 evaluation prompts)"
        ),
        None,
    ),
    Row(
        "a turn (training)",
        (
            "`_generate_vllm_with_retrieve`: vLLM stops at `<|end_of_query|>` alone, 512 tokens, temperature 1, top_p "
            "0.95; a segment that holds `<|begin_of_query|>` and stopped there searches what follows the last open, "
            '`"` deleted, white space collapsed; an empty query ends the episode'
        ),
        (
            "`stops(False)`, `episode.max_segment_tokens` 512, `rollout.temperature` 1.0 and `rollout.top_p` 0.95 in "
            "both stages; `last_query` reads the query"
        ),
        (
            f"{ORACLE}::test_a_segments_query_is_read_as_r1_searchers_rollout_reads_it",
            f"{ORACLE}::test_the_stages_turn_is_r1_searchers_rollout_turn",
        ),
        "12 segments run through its turn's own statements",
        (
            'ours turns `"` and curly quotes into a space, where it deletes `"` and keeps curly ones '
            '(`Paris"France` is `ParisFrance` there); its context keeps the segment stripped of white space at both '
            "ends and tokenised again, ours the tokens sampled"
        ),
    ),
    Row(
        "documents",
        (
            "`(i)line\\n` for each of the top-3 corpus lines, the row number cut (`^\\d+\\s+`), in "
            "`\\n\\n<|begin_of_documents|>\\n...<|end_of_documents|>\\n\\n` after `<|end_of_query|>`; no "
            "result: `None`"
        ),
        (
            "`format_documents`, `episode.top_k: 3`; a line imported by `index import --layout r1-searcher` and "
            "rendered by `r1_text`"
        ),
        (f"{ORACLE}::test_an_imported_line_comes_back_in_r1_searchers_documents_block",),
        "byte for byte for its HotpotQA abstracts lines (`Title: t Text:  text`, its training corpus)",
        (
            "a KILT line (`title   words`, its 2Wiki/MuSiQue/Bamboogle corpus) renders as `Title: title Text: words`; "
            "an abstracts line with three spaces in its text is split there and shows a second `Title:`; no result "
            "is `(1)No documents were found for this query.` here, where its `None` breaks its own tag-count rule; "
            "a byte-order mark before a row stays in its block"
        ),
    ),
    Row(
        "search cap (training)",
        "`for t in range(11)` with `if t == 8` ending the episode: 8 searches, a 9th query left unanswered",
        "`episode.max_searches: 8`: a 9th search ends the episode unanswered (`search_capped`)",
        (f"{ORACLE}::test_the_search_cap_ends_an_episode_where_r1_searchers_loop_does",),
        "",
        None,
    ),
    Row(
        "evaluation: sampling, top-k",
        "`eval_search_loacl.py`: `--temp 0.0` (greedy), top-5, 512 tokens a segment",
        "`eval local --protocol r1-searcher`: temperature 0, top-5, 512 tokens",
        (f"{ORACLE}::test_its_evaluation_top_k_sampling_and_segment_are_ours",),
        "its top_p 0.95 does nothing at temperature 0",
        None,
    ),
    Row(
        "evaluation: stops, search cap, query",
        (
            "stops at `<|end_of_query|>`, `</answer>`, `<|im_end|>`, `<|endoftext|>`; `range(16)` but `k == 9` ends "
            "every episode still going with `I don't know.`: 9 searches; the query loses `\"`, `'`, `...`, tabs"
        ),
        "stops at `<|end_of_query|>` (and EOS); up to 16 searches; the query read as in training",
        (),
        (
            "ours goes on after `</answer>` to the segment's end and reads the last answer; it allows 16 searches "
            "where its loop stops at 9; `France's` is searched as `Frances` there, and an empty query as white "
            "space, where ours ends the episode (recorded: `settings.json`, `turn.json`)"
        ),
        None,
    ),
    Row(
        "retriever: query",
        (
            "`wiki_corpus_load.py`: FlagModel's `query_instruction_for_retrieval` before each query, `k` from the "
            "request (3 by default); the corpus encoded at 300 tokens"
        ),
        "the `bge` profile's instruction, `LAYOUT_MAX_LENGTH` 300 for `--layout r1-searcher`",
        (f"{ORACLE}::test_the_query_instruction_and_lengths_are_r1_searchers_retrievers",),
        (
            "ours adds a space after the instruction's colon: the same token ids under bge's uncased WordPiece "
            "(checked with the bundled MiniLM's tokenizer, which splits the same way)"
        ),
        None,
    ),
    Row(
        "retriever: pooling, index",
        (
            "FlagEmbedding's `FlagModel` over `bge-large-en-v1.5` (its defaults: CLS pooling, normalised), fp32, a "
            "Flat inner-product FAISS index"
        ),
        (
            "the `bge` profile: CLS pooling, normalised; `index import --layout r1-searcher` serves its FAISS file "
            "and refuses it when 16 sampled rows encoded here fall below cosine 0.99 of its stored vectors"
        ),
        (),
        (
            "no oracle run: FlagEmbedding and bge-large-en-v1.5 (1.3 GB) are not in this environment, so its "
            "encoder's output is not recorded; the import's check compares vectors on the real index"
        ),
        None,
    ),
)


def cell(text: str) -> str:
    # R1-Searcher's tags hold `|`, which splits a Markdown table's cell even inside a code span unless escaped.
    return text.replace("|", "\\|")


def table() -> str:
    lines = ["| mechanism | R1-Searcher | ours | same? why |", "| --- | --- | --- | --- |"]
    lines += [f"| {r.mechanism} | {cell(r.original)} | {cell(r.ours)} | {cell(r.verdict())} |" for r in ROWS]
    return "\n".join(lines) + "\n"
