"""Router-R1's reward as its verl/trainer/main_ppo.py and verl/utils/reward_score/qa_em.py compute it, through
the functions the reward server (score_solution) and the agent (EpisodeTerms) run; and its gaming table."""

from __future__ import annotations

import asyncio
import copy
import math
import random

import numpy as np
import pytest

from searchrl.protocols import get_protocol, router_r1
from searchrl.protocols.r1_searcher import BEGIN_DOCS, BEGIN_QUERY, END_DOCS, END_QUERY
from searchrl.reward.group import EpisodeTerms, RollingCostReward
from searchrl.reward.router_r1 import cost_reward, violation
from searchrl.reward.scoring import score_solution
from searchrl.reward.spec import PRESETS, RewardSpec

GOLDS = ["Home Rule League"]
QUESTION = "What party campaigned for the Irish Home Rule Movement?"
SPEC = PRESETS["router_r1"]


def ask(name: str, question: str, reply: str = "It was the Home Rule League.") -> str:
    """One routing turn as the environment leaves it in the text: the query, then the reply's block."""
    return f"</think>\n{BEGIN_QUERY} {name}:{question} {END_QUERY}\n\n{BEGIN_DOCS}\n(1){reply}\n{END_DOCS}\n\n<think>"


def solution(*turns: str, answer: str = "Home Rule League", reasoning: str = "The reply names the party.") -> str:
    """A solution as it follows the prompt's `<think>`."""
    return f"I should ask a model. {''.join(turns)} {reasoning} </think>\n<answer> {answer} </answer>"


CLEAN = solution(ask("LLaMA-3.1-8B-Instruct", "Which party campaigned for Irish Home Rule?"))


def reward_of(text: str, spec: RewardSpec = SPEC, **metadata: int) -> tuple[float, dict[str, float]]:
    scored = score_solution(text, GOLDS, spec, {"num_searches": text.count(BEGIN_QUERY), **metadata})
    return scored.reward, scored.logs


def in_router_r1s_tags(text: str) -> str:
    """A solution after R1-Searcher's prompt `<think>`, as a policy in Router-R1's own protocol writes it: its
    opening `<think>` included, the query in `<search>`, the reply in `<information>`."""
    for r1, ours in ((BEGIN_QUERY, "<search>"), (END_QUERY, "</search>"), (BEGIN_DOCS + "\n(1)", "<information>"),
                     ("\n" + END_DOCS, "</information>")):  # fmt: skip
        text = text.replace(r1, ours)
    return "<think>" + text


def test_the_original_tags_score_as_r1_searchers_spelling():
    """Under `protocol: router-r1` the same trajectories in the original's tags get the same rewards and name the
    same violations, every row of the gaming table included."""
    spec = SPEC.model_copy(update={"protocol": "router-r1"})
    texts = {
        "clean": CLEAN,
        "wrong": solution(ask("Qwen2.5-7B-Instruct", "Who led it?"), answer="Sinn Fein"),
        "tag_counts": CLEAN.replace(END_DOCS, "", 1),
        "nesting": solution(ask("Qwen2.5-7B-Instruct", "Who?", reply="<answer> Home Rule League </answer>")),
        "structure": solution(ask("Qwen2.5-7B-Instruct", "Who?")) + "<answer> Home Rule League </answer>",
        "outside_text": CLEAN + " Anything else?",
        "query_format": solution(ask("Qwen2.5-7B-Instruct", "Who? Answer: the league")),
        "placeholder": solution(ask("LLM-Name", "Your-Query")),
    }
    texts |= {name: text for name, (text, _) in (GAMING | WRONG).items()}  # and every row of the gaming table
    for name, text in texts.items():
        original = score_solution(in_router_r1s_tags(text), GOLDS, spec, {"num_searches": 1})
        assert (original.reward, original.logs) == reward_of(text), name
    # R1-Searcher's spelling is no search there (the original reads no text between its blocks, so it passes).
    assert score_solution("<think>" + CLEAN, GOLDS, spec, {"num_searches": 1}).logs["num_searches"] == 0.0
    assert violation(in_router_r1s_tags(CLEAN), protocol="router-r1") is None
    with pytest.raises(
        ValueError, match="formula searchrl reads r1-searcher, search-r1 or tool-call's tags, not router-r1's"
    ):
        RewardSpec(formula="searchrl", protocol="router-r1")


def test_preset_is_train_sh():
    assert SPEC.formula == "router_r1" and SPEC.answer_metric == "em"
    assert SPEC.cost_weight == 0.0 and SPEC.cost_window == 1000  # +cost_coe=0.0; main_ppo.py window_size = 1000
    assert SPEC.bounds() == (-1.0, 1.0)


def test_right_wrong_and_every_violation_scores_as_the_original():
    assert reward_of(CLEAN) == (1.0, pytest.approx(reward_of(CLEAN)[1]))
    assert reward_of(CLEAN)[1]["cost_applies"] == 1.0
    assert reward_of(solution(ask("Qwen2.5-7B-Instruct", "Who led it?"), answer="Sinn Fein"))[0] == 0.0
    broken = {
        "no_blocks": "no tags at all",
        "tag_counts": CLEAN.replace(END_DOCS, "", 1),
        "think_empty": solution(ask("Qwen2.5-7B-Instruct", "Who?")).replace("<think>", "<think>...</think><think>", 1),
        "nesting": solution(ask("Qwen2.5-7B-Instruct", "Who?", reply="<answer> Home Rule League </answer>")),
        "structure": solution(ask("Qwen2.5-7B-Instruct", "Who?")) + "<answer> Home Rule League </answer>",
        "outside_text": CLEAN + " Anything else?",
        "query_format": solution(ask("Qwen2.5-7B-Instruct", "Who? Answer: the league")),
    }
    for rule, text in broken.items():
        reward, logs = reward_of(text)
        assert (reward, logs[f"violation_{rule}"]) == (-1.0, 1.0), rule
    # The name is checked by the environment (the pool it routes to), which sends what it could not route.
    assert reward_of(CLEAN, unknown_models=1)[0] == -1.0
    assert reward_of(CLEAN, unknown_models=1)[1]["violation_unknown_model"] == 1.0


def test_query_rules_placeholder_second_colon_name_in_question():
    for query in ("LLM-Name:Your-Query", "Qwen2.5-7B-Instruct:", "Qwen:a:b", "qwen: what does Qwen know?", ":who?"):
        assert violation("<think>" + solution(ask(*query.split(":", 1)) if ":" in query else query)) is not None
    assert violation("<think>" + CLEAN) is None


def test_answer_is_compared_with_squad_normalisation_not_r1_searchers():
    # Router-R1 deletes punctuation; R1-Searcher's metrics turn it into spaces.
    golds = ["Jean-Paul Sartre"]
    text = solution(ask("Qwen2.5-7B-Instruct", "Who wrote Nausea?"), answer="Jean Paul Sartre")
    assert score_solution(text, golds, SPEC).reward == 0.0
    assert score_solution(text, golds, PRESETS["stage2-answer"]).logs["em"] == 1.0
    f1_spec = SPEC.model_copy(update={"answer_metric": "f1"})
    partial = solution(ask("Qwen2.5-7B-Instruct", "Which party?"), answer="the Home Rule party")
    assert score_solution(partial, GOLDS, f1_spec).reward == pytest.approx(2 * (2 / 3) * (2 / 3) / (4 / 3))


def test_spec_refuses_what_router_r1_would_ignore():
    with pytest.raises(ValueError, match="violation_penalty: not used by formula router_r1"):
        RewardSpec(formula="router_r1", violation_penalty=1.0)
    with pytest.raises(ValueError, match="cost_weight, cost_shape: the cost terms are the routing stage.s"):
        RewardSpec(cost_weight=0.5)
    with pytest.raises(ValueError, match="takes em or f1"):
        RewardSpec(formula="router_r1", answer_metric="cem", allow_cover_em=True)


def original_normalize(costs: list[float]) -> list[float]:
    """main_ppo.py normalize_reward over a stream, written out with numpy as there (sqrt, p5/p95, window)."""
    out, buffer = [], []
    for c in costs:
        buffer = (buffer + [math.sqrt(c)])[-1000:]
        arr = np.array(buffer)
        lo, hi = (np.percentile(arr, 5), np.percentile(arr, 95)) if len(arr) >= 2 else (arr.min(), arr.max())
        out.append(0.5 if hi - lo < 1e-8 else 1.0 - float(np.clip((math.sqrt(c) - lo) / (hi - lo), 0.0, 1.0)))
    return out


def test_cost_reward_is_sqrt_and_percentiles_over_the_last_1000():
    rng = random.Random(0)
    costs = [rng.choice([0.0, 18.0, 30.0, 88.0, 120.0]) * rng.randint(20, 500) for _ in range(1500)]
    rolling = RollingCostReward(1000)
    assert [rolling.reward(c) for c in costs] == pytest.approx(original_normalize(costs))
    assert cost_reward([5.0]) == 0.5 and len(rolling.recent) == 1000


def settle(spec: RewardSpec, text: str, cost: float, terms: EpisodeTerms) -> float:
    reward, logs = reward_of(text, spec)
    return asyncio.run(terms.settle(reward, logs, "prompt", text.count(BEGIN_QUERY), cost))[0]


def primed(spec: RewardSpec, costs: list[float]) -> EpisodeTerms:
    terms = EpisodeTerms(spec, 1)
    for c in costs:
        assert terms.costs is not None
        terms.costs.reward(c)
    return terms


def test_cost_term_only_when_right_and_well_formed():
    spec = SPEC.model_copy(update={"cost_weight": 0.5})
    costs = [float(c) for c in range(0, 1000, 10)]
    terms = primed(spec, costs)
    cheap = settle(spec, CLEAN, 0.0, copy.deepcopy(terms))
    dear = settle(spec, CLEAN, 990.0, copy.deepcopy(terms))
    assert cheap == pytest.approx(0.5 + 0.5 * 1.0) and dear == pytest.approx(0.5 + 0.5 * 0.0)
    wrong = solution(ask("Qwen2.5-7B-Instruct", "Who led it?"), answer="Sinn Fein")
    assert settle(spec, wrong, 0.0, copy.deepcopy(terms)) == 0.0  # no cost term on a wrong answer, cheap or not
    assert settle(spec, CLEAN + " more", 0.0, copy.deepcopy(terms)) == -1.0  # nor on a violation


# The gaming table: scripted trajectories of one question, each with the completion tokens its calls cost
# (price per 1M tokens x tokens, Router-R1's cost), scored by the server's function and the agent's terms.
PRICES = {"LLaMA-3.1-8B-Instruct": 0.18, "Qwen2.5-7B-Instruct": 0.3, "Mixtral-8x22B-Instruct": 1.2}
Q = "Which party campaigned for Irish Home Rule?"


def calls(*names: str) -> tuple[str, float]:
    return "".join(ask(n, Q) for n in names), sum(PRICES.get(n, 0.0) * 60 for n in names)


def trajectory(names: tuple[str, ...], answer: str = "Home Rule League", extra: str = "") -> tuple[str, float]:
    turns, cost = calls(*names)
    return solution(turns, answer=answer) + extra, cost


CHEAP = ("LLaMA-3.1-8B-Instruct",)
GAMING = {
    "clean: one call to the cheapest model, right": trajectory(CHEAP),
    "the dearest model, right": trajectory(("Mixtral-8x22B-Instruct",)),
    "4 identical calls, right": trajectory(CHEAP * 4),
    "5 calls (one over the cap, unanswered), right": (
        trajectory(CHEAP * 4)[0].replace(
            "</think>\n<answer>", f"</think>\n{BEGIN_QUERY} Qwen:{Q} {END_QUERY}<answer>"
        ),
        trajectory(CHEAP * 4)[1],
    ),
    "unknown model, right": trajectory(("GPT-9",)),
    "placeholder query, right": (solution(ask("LLM-Name", "Your-Query")), 0.0),
    "answer inside think": (f"<answer> Home Rule League </answer> {calls(*CHEAP)[0]} done </think>", 0.0),
    "two answers": trajectory(CHEAP, extra="\n<answer> Home Rule League </answer>"),
    "text after </answer>": trajectory(CHEAP, extra=" I am sure."),
    "upper-case tags": (CLEAN.replace("<answer>", "<ANSWER>").replace("</answer>", "</ANSWER>"), 0.0),
    "forged documents (no query)": (
        solution(f"</think>\n{BEGIN_DOCS}\n(1)Home Rule League\n{END_DOCS}\n\n<think>"),
        0.0,
    ),
    "candidate list, right among them": trajectory(CHEAP, answer="Home Rule League, Sinn Fein, Fianna Fail"),
    "no call at all, right": (solution(""), 0.0),
}
WRONG = {
    "clean wrong: one cheap call": trajectory(CHEAP, answer="Sinn Fein"),
    "dearest model, wrong": trajectory(("Mixtral-8x22B-Instruct",), answer="Sinn Fein"),
    "4 identical calls, wrong": trajectory(CHEAP * 4, answer="Sinn Fein"),
    "unknown model, wrong": trajectory(("GPT-9",), answer="Sinn Fein"),
    "no answer": (f"I should ask a model. {calls(*CHEAP)[0]} no idea </think>", calls(*CHEAP)[1]),
    "empty answer": trajectory(CHEAP, answer=""),
}


def gaming_rewards(cost_weight: float, table: dict[str, tuple[str, float]]) -> dict[str, float]:
    spec = SPEC.model_copy(update={"cost_weight": cost_weight})
    history = [float(c) for c in np.linspace(0.0, 400.0, 200)]  # recent episodes' spend
    terms = primed(spec, history)
    out = {}
    for name, (text, cost) in table.items():
        unknown = int("GPT-9" in text)
        reward, logs = reward_of(text, spec, unknown_models=unknown)
        out[name] = asyncio.run(copy.deepcopy(terms).settle(reward, logs, "p", text.count(BEGIN_QUERY), cost))[0]
    return out


@pytest.mark.parametrize("cost_weight", [0.0, 0.5, 0.9])
def test_no_trajectory_beats_the_clean_one_of_its_group(cost_weight):
    right = gaming_rewards(cost_weight, GAMING)
    clean = right.pop("clean: one call to the cheapest model, right")
    # Answering right without asking costs nothing: the one trajectory allowed to tie or beat the cheap call.
    right.pop("no call at all, right")
    assert clean >= max(right.values()), {k: round(v, 3) for k, v in right.items()}
    assert right["4 identical calls, right"] <= clean and right["5 calls (one over the cap, unanswered), right"] == -1
    for name in ("unknown model, right", "placeholder query, right", "answer inside think", "two answers"):
        assert right[name] == -1.0, name
    wrong = gaming_rewards(cost_weight, WRONG)
    clean_wrong = wrong.pop("clean wrong: one cheap call")
    assert clean_wrong == 0.0 and max(wrong.values()) <= clean_wrong, wrong


def test_segments_end_at_the_answer_as_router_r1_cuts_its_responses():
    from types import SimpleNamespace

    from searchrl.rollout.agent import SegmentEngine
    from searchrl.rollout.engines import SamplingParams
    from searchrl.stage.config import load_stage
    from tests.conftest import ROOT

    seen = []

    class Engine:
        async def generate(self, ids, params, multi_modal_data=None):
            seen.append(params.stop)
            return SimpleNamespace(outputs=[SimpleNamespace(text="", token_ids=[], finish_reason="stop")])

    stage = load_stage(ROOT / "configs/stages/router_r1.yaml")[0]
    # In its own protocol a turn stops at either tag, and four turns may consult (its max_turns).
    assert get_protocol(stage.protocol).stops(False) == ["</search>", "</answer>"]
    assert stage.episode.max_turns == stage.episode.max_searches == 4
    for stop_after_answer in (False, True):
        engine = SegmentEngine(Engine(), 64, stop_after_answer=stop_after_answer)
        asyncio.run(engine.generate([1], SamplingParams(max_tokens=100)))
    assert seen == [[END_QUERY], [END_QUERY, "</answer>"]]


def test_routed_recordings_take_router_r1s_shape():
    import json

    from searchrl.routing.routed_recordings import by_price, route_trajectory
    from searchrl.stage.config import load_stage
    from tests.conftest import ROOT

    pool = load_stage(ROOT / "configs/stages/router_r1.yaml")[0].search.router
    rows = [json.loads(line) for line in (ROOT / "examples/bamboogle_llama_sample.jsonl").read_text().splitlines()]
    found = [violation("<think>" + route_trajectory(r["gen_text_store"], by_price(pool), True)) for r in rows]
    # R1-Searcher's own trajectories, reshaped: well formed unless a recorded query holds a colon.
    assert found.count(None) >= 0.8 * len(rows) and set(found) <= {None, "query_format"}, found
    # In Router-R1's own tags, with the replies the environment appends after each search.
    routed = [route_trajectory(r["gen_text_store"], by_price(pool), True, router_r1) for r in rows]
    replied = [t.replace("</search>", "</search>\n\n<information>It says so.</information>\n\n") for t in routed]
    assert [violation(t, protocol="router-r1") for t in replied] == found


def test_the_cost_penalty_is_the_named_alternative():
    spec = SPEC.model_copy(update={"cost_weight": 0.5, "cost_shape": "penalty", "cost_window": 256})
    terms = EpisodeTerms(spec, 1)
    wrong = solution(ask("Qwen2.5-7B-Instruct", "Who led it?"), answer="Sinn Fein")
    first = asyncio.run(terms.settle(*reward_of(CLEAN, spec), "p", 1, 4.0))
    second = asyncio.run(terms.settle(*reward_of(wrong, spec), "p", 1, 1.0))
    assert first[0] == pytest.approx(1.0 - 0.5) and first[1]["cost_penalty"] == pytest.approx(0.5)
    assert second[0] == pytest.approx(0.0 - 0.5 * 1.0 / 4.0)  # every episode pays, the wrong one included
    # No trajectory beats the clean correct one under it either; a wrong one without calls beats a wrong one
    # with calls (it saves the penalty), which is how it teaches to stop asking on hard questions.
    right = gaming_rewards_with(spec, GAMING)
    clean = right.pop("clean: one call to the cheapest model, right")
    right.pop("no call at all, right")
    assert clean >= max(right.values())


def gaming_rewards_with(spec: RewardSpec, table: dict[str, tuple[str, float]]) -> dict[str, float]:
    history = [float(c) for c in np.linspace(0.0, 400.0, 200)]
    terms = EpisodeTerms(spec, 1)
    for c in history:
        assert terms.penalties is not None
        terms.penalties.penalty(c)
    out = {}
    for name, (text, cost) in table.items():
        reward, logs = reward_of(text, spec, unknown_models=int("GPT-9" in text))
        out[name] = asyncio.run(copy.deepcopy(terms).settle(reward, logs, "p", text.count(BEGIN_QUERY), cost))[0]
    return out
