"""The search-r1 protocol against what Search-R1's own functions returned on the same inputs (recorded from its
repository by tests/fixtures/search_r1_oracle/record.py, the commit in each record):
- `_passages2string`: a wiki-18 passage imported here and rendered by the protocol, through the environment, gives
  Search-R1's string byte for byte, and `/retrieve` gives back the contents it was imported from;
- `postprocess_predictions`: a turn's action and its content read as Search-R1 reads them."""

from __future__ import annotations

import asyncio
import json

import pytest

from search_backend.serve.app import format_search_r1
from searchrl.protocols import search_r1
from searchrl.rollout.environment import Episode, SearchEnvironment
from searchrl.search.base import Passage
from searchrl.search.index.corpus import CorpusReport
from searchrl.search.index.importer import search_r1_records
from searchrl.stage.config import EpisodeConfig
from tests.conftest import FIXTURES, ROOT

RECORD = json.loads((FIXTURES / "search_r1_oracle/passages2string.json").read_text(encoding="utf-8"))
CASES = RECORD["cases"]
ACTIONS = json.loads((FIXTURES / "search_r1_oracle/postprocess_predictions.json").read_text(encoding="utf-8"))


def imported(case: dict, tmp_path) -> list[Passage]:
    """The case's retrieval results written as wiki-18 lines and read back by `index import --layout search-r1`."""
    corpus = tmp_path / "wiki-18.jsonl"
    corpus.write_text("".join(json.dumps(r["document"]) + "\n" for r in case["results"]), encoding="utf-8")
    report = CorpusReport()
    records = [record for record, _ in search_r1_records(corpus, report)]
    assert report.bad == 0 and len(records) == len(case["results"])
    return [Passage(r.id, r.title, r.text, d["score"]) for r, d in zip(records, case["results"], strict=True)]


def observation(output: str) -> str:
    """`execute_predictions`' wrap of `_passages2string`'s output, as generation.py writes it."""
    return f"\n\n<information>{output.strip()}</information>\n\n"


def test_the_record_names_its_source():
    assert RECORD["source"]["repository"] == "PeterGriffinJin/Search-R1" and len(RECORD["source"]["commit"]) == 40
    assert RECORD["source"]["function"].endswith("_passages2string") and len(CASES) >= 6


@pytest.mark.parametrize("case", CASES, ids=[c["what"] for c in CASES])
def test_an_imported_passage_renders_as_search_r1s_own_code_renders_it(case, tmp_path):
    passages = imported(case, tmp_path)
    assert search_r1.render_documents(passages) == observation(case["output"])
    assert [format_search_r1(p)["contents"] for p in passages] == [r["document"]["contents"] for r in case["results"]]


class Found:
    """A backend that returns the case's passages, so the environment's own rendering is what is compared."""

    def __init__(self, passages: list[Passage]) -> None:
        self.passages = passages

    async def search(self, queries, top_k):
        return [self.passages[:top_k] for _ in queries]

    async def aclose(self):
        pass


def test_the_environment_renders_search_r1s_string_and_bare_titles_only_when_asked(tmp_path):
    case = CASES[0]
    passages = imported(case, tmp_path)
    feedback = {}
    for bare in (False, True):
        env = SearchEnvironment(Found(passages), EpisodeConfig(bare_titles=bare), protocol=search_r1)
        out = asyncio.run(env.step(Episode(prompt="P", label="x"), "<think>a</think>\n<search> q </search>"))
        feedback[bare] = out.feedback
    assert feedback[False] == observation(case["output"])
    assert "Doc 1(Title: Evan Morris) Evan Morris" in feedback[True]
    assert '(Title: "' not in feedback[True] and feedback[True].count("(Title: ") == 3


@pytest.mark.parametrize("case", ACTIONS["cases"], ids=[c["what"] for c in ACTIONS["cases"]])
def test_a_turns_action_is_read_as_search_r1s_own_code_reads_it(case):
    """Search-R1 returns ([action], [content]); an empty search is searched as "", as it does."""
    (kind,), (content,) = case["output"]
    assert search_r1.action(case["predictions"]) == (kind, content)
    searched = search_r1.search_query(case["predictions"])
    assert searched == (content if kind == "search" else None)


RECIPE = json.loads((FIXTURES / "search_r1_oracle/recipe.json").read_text(encoding="utf-8"))


def test_search_r1s_stage_runs_its_grpo_script_as_verl_normalises_it():
    """Each value derived from train_grpo.sh over verl's ppo_trainer.yaml (recorded by record.py), against the flags
    `searchrl stage dry-run search_r1` renders and OpenRLHF's parser reads. verl repeats each prompt n_agent times
    and scales the mini-batch by rollout.n (1 here), so a step of 512 prompts x 5 samples is 2,560 sequences in
    mini-batches of 256 sequences: 10 optimizer updates a step."""
    from searchrl.job.plan import plan_stage
    from searchrl.stage.openrlhf_flags import check_args

    v = RECIPE["grpo"]["values"]
    assert (
        RECIPE["grpo"]["mini_batch_rule"]["line"] == "self.config.actor.ppo_mini_batch_size *= self.config.rollout.n"
    )
    sequences = v["data.train_batch_size"] * v["actor_rollout_ref.rollout.n_agent"]
    mini_batch = v["actor_rollout_ref.actor.ppo_mini_batch_size"] * v["actor_rollout_ref.rollout.n"]
    assert sequences // mini_batch == 10
    plan = plan_stage("search_r1", None, [])
    ns = vars(check_args(plan["train_args"]))
    assert ns["rollout.batch_size"] == v["data.train_batch_size"]
    assert ns["rollout.n_samples_per_prompt"] == v["actor_rollout_ref.rollout.n_agent"]
    ours_sequences = ns["rollout.batch_size"] * ns["rollout.n_samples_per_prompt"]
    assert ours_sequences == sequences and ours_sequences // ns["train.batch_size"] == sequences // mini_batch
    assert ns["rollout.temperature"] == v["actor_rollout_ref.rollout.temperature"]
    assert ns["rollout.top_p"] == v["actor_rollout_ref.rollout.top_p"] == 0.95
    assert ns["actor.adam.lr"] == v["actor_rollout_ref.actor.optim.lr"]
    assert ns["actor.lr_warmup_ratio"] == v["actor_rollout_ref.actor.optim.lr_warmup_steps_ratio"]
    assert ns["actor.lr_scheduler"] == "constant_with_warmup"
    assert ns["algo.kl.init_coef"] == v["actor_rollout_ref.actor.kl_loss_coef"] and ns["algo.kl.use_loss"]
    assert (ns["algo.kl.estimator"], v["actor_rollout_ref.actor.kl_loss_type"]) == ("k3", "low_var_kl")
    assert ns["actor.entropy_coef"] == v["actor_rollout_ref.actor.entropy_coeff"]
    assert (ns["algo.advantage.estimator"], v["algorithm.adv_estimator"]) == ("group_norm", "grpo")
    episode = plan["stage"].episode
    assert (episode.max_turns, episode.top_k) == (v["max_turns"], v["retriever.topk"])
    # Validation every test_freq steps, greedy and one sample as its _validate generates (do_sample False).
    assert ns["eval.steps"] == v["trainer.test_freq"] == 50 and ns["eval.dataset"].endswith("search_r1_test.jsonl")
    assert (ns["eval.temperature"], ns["eval.n_samples_per_prompt"]) == (0.0, 1)
    # Its 1,005 steps: `data prepare search_r1 --steps 1005` writes 1,005 x 512 prompts, one OpenRLHF episode over
    # them (max_steps counts optimizer updates: 10 a step).
    assert ns["train.num_episodes"] == 1 and v["trainer.total_training_steps"] == 1005
    prompts = v["trainer.total_training_steps"] * ns["rollout.batch_size"]
    updates = prompts * ns["rollout.n_samples_per_prompt"] // ns["train.batch_size"] * ns["train.num_episodes"]
    assert updates == 1005 * 10 and "--steps 1005" in (ROOT / "configs/stages/search_r1.yaml").read_text()


def test_search_r1s_ppo_script_is_a_named_choice():
    """`algorithm=search-r1-ppo` on the search_r1 stage against train_ppo.sh over verl's defaults, as recorded: GAE
    with a critic, one sample a prompt (512 sequences in mini-batches of 256: 2 updates a step), the actor's and the
    critic's warm-ups then constant rates, KL in the reward at 0.001 (k1, verl's `kl`), value clip 0.5."""
    from searchrl.job.plan import plan_stage
    from searchrl.stage.openrlhf_flags import check_args

    v = RECIPE["ppo"]["values"]
    ns = vars(check_args(plan_stage("search_r1", None, ["algorithm=search-r1-ppo"])["train_args"]))
    assert (ns["algo.advantage.estimator"], v["algorithm.adv_estimator"]) == ("gae", "gae")
    assert ns["rollout.n_samples_per_prompt"] == v["actor_rollout_ref.rollout.n_agent"] == 1
    sequences = v["data.train_batch_size"] * v["actor_rollout_ref.rollout.n_agent"]
    assert ns["rollout.batch_size"] * ns["rollout.n_samples_per_prompt"] == sequences
    assert sequences // ns["train.batch_size"] == sequences // v["actor_rollout_ref.actor.ppo_mini_batch_size"] == 2
    assert ns["actor.adam.lr"] == v["actor_rollout_ref.actor.optim.lr"]
    assert ns["actor.lr_warmup_ratio"] == v["actor_rollout_ref.actor.optim.lr_warmup_steps_ratio"] == 0.285
    assert ns["critic.adam.lr"] == v["critic.optim.lr"]
    assert ns["critic.lr_warmup_ratio"] == v["critic.optim.lr_warmup_steps_ratio"] == 0.015
    assert v["actor_rollout_ref.actor.optim.warmup_style"] == v["critic.optim.warmup_style"] == "constant"
    assert ns["actor.lr_scheduler"] == ns["critic.lr_scheduler"] == "constant_with_warmup"
    assert ns["algo.kl.init_coef"] == v["algorithm.kl_ctrl.kl_coef"] and not v["actor_rollout_ref.actor.use_kl_loss"]
    assert not ns["algo.kl.use_loss"] and (ns["algo.kl.estimator"], v["algorithm.kl_penalty"]) == ("k1", "kl")
    assert ns["critic.value_clip"] == v["critic.cliprange_value"]
    assert (ns["algo.advantage.gamma"], ns["algo.advantage.lambd"]) == (v["algorithm.gamma"], v["algorithm.lam"])
    assert ns["actor.entropy_coef"] == v["actor_rollout_ref.actor.entropy_coeff"]
    assert ns["rollout.top_p"] == v["actor_rollout_ref.rollout.top_p"]


def test_options_md_search_r1_table_is_the_parity_rows_and_says_same_only_where_a_test_exists():
    """docs/OPTIONS.md's Search-R1 table is tests/search_r1_parity.py rendered; every row that reads "same" names
    tests, and each named test function exists in its file (the suite runs them)."""
    from tests.search_r1_parity import ROWS, check_docs_table, table

    check_docs_table(ROOT / "docs/OPTIONS.md", "search-r1-parity", ROWS, table())


BM25_RECORD = json.loads((FIXTURES / "search_r1_oracle/bm25_pyserini.json").read_text(encoding="utf-8"))


def top10_overlap(index_dir) -> float:
    """Mean share of pyserini's recorded top-10 that our BM25 over the same passages returns in its top 10."""
    from searchrl.search.bm25 import BM25Backend

    backend = BM25Backend(index_dir)
    cases = BM25_RECORD["cases"]
    found = backend.search_sync([c["query"] for c in cases], BM25_RECORD["top"])
    shares = [
        len({p.id for p in hits} & set(c["ids"])) / len(c["ids"]) if c["ids"] else float(not hits)
        for c, hits in zip(cases, found, strict=True)
    ]
    return sum(shares) / len(shares)


def test_bm25_in_pyserinis_flavour_ranks_as_search_r1s_bm25_ranks():
    """`--bm25-flavour pyserini` against pyserini's LuceneSearcher at its defaults, recorded over the same 295 kiltmini
    passages for 1,000 kiltmini queries (record_bm25.py): the top-10 overlap is at least 0.95 (0.982 when recorded),
    where bm25s's own defaults keep 0.867 of it."""
    from tests.test_search_hybrid import rebuilt

    assert BM25_RECORD["source"]["library"].startswith("pyserini") and len(BM25_RECORD["cases"]) == 1000
    ours = rebuilt("faiss", bm25=True, bm25_flavour="pyserini")
    default = rebuilt("faiss", bm25=True)
    assert json.loads((ours / "bm25.json").read_text())["k1"] == 0.9
    faithful, plain = top10_overlap(ours), top10_overlap(default)
    assert faithful >= 0.95 and plain < 0.9, (faithful, plain)


def test_options_md_recipe_table_is_the_recorded_values_beside_the_resolved_stage():
    """Search-R1's value -> our flag table in docs/OPTIONS.md, rendered from recipe.json and the flags `searchrl stage
    dry-run search_r1` gives OpenRLHF's parser."""
    from searchrl.job.plan import plan_stage
    from searchrl.stage.openrlhf_flags import check_args
    from tests.search_r1_parity import recipe_table

    plan = plan_stage("search_r1", None, [])
    flags, episode = vars(check_args(plan["train_args"])), plan["stage"].episode.model_dump()
    stage_text = (ROOT / "configs/stages/search_r1.yaml").read_text(encoding="utf-8")
    page = (ROOT / "docs/OPTIONS.md").read_text(encoding="utf-8")
    block = page.split("<!-- table:search-r1-recipe -->\n", 1)[1].split("<!-- /table -->", 1)[0]
    assert block == recipe_table(RECIPE, flags, episode, stage_text), "docs/OPTIONS.md: re-render the recipe table"
