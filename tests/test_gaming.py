"""No trajectory a policy can learn scores above the clean right answer of its group, and no wrong answer above
the clean wrong one: the scripted trajectories of tests/gaming.py, through the agent and OpenRLHF's loop against
real servers, for every stage and option. Presets exact to R1-Searcher keep its weaknesses, each named."""

from __future__ import annotations

import pytest

from tests import gaming
from tests.gaming import CLEAN_RIGHT, CLEAN_WRONG, GROUPS

TOLERANCE = 1e-9


@pytest.fixture(scope="module")
def results(mini_index):
    return gaming.run_all(mini_index)


@pytest.mark.parametrize("group", GROUPS, ids=[g.name for g in GROUPS])
def test_nothing_beats_the_clean_answers(results, group):
    got = results[group.name]
    right, wrong = got[CLEAN_RIGHT].reward, got[CLEAN_WRONG].reward
    beaten = []
    for row in group.rows():
        bound = right if row.correct else min(right, wrong)
        above = got[row.name].reward > bound + TOLERANCE
        if row.name in group.inherited:
            # A documented inherited exception must still be one, or the docs would claim a weakness that is gone.
            assert above, f"{group.name}: {row.name!r} no longer beats its bound; drop it from `inherited`"
        elif above:
            beaten.append(f"{row.name!r} scores {got[row.name].reward:.2f} > {bound:.2f}")
    assert not beaten, f"{group.name}: " + "; ".join(beaten)


def test_efficiency_bonus_goes_to_well_formed_right_answers_only(results):
    # Whatever the third sample of the group does, the clean sample with the fewest searches keeps the full bonus:
    # a sample that forged documents or broke the format must not take it or set the group's range.
    group = next(g for g in GROUPS if g.companions)
    got = results[group.name]
    reference = got[CLEAN_RIGHT].companions[CLEAN_RIGHT]
    moved = {
        name: outcome.companions[CLEAN_RIGHT]
        for name, outcome in got.items()
        if abs(outcome.companions[CLEAN_RIGHT] - reference) > TOLERANCE
    }
    assert reference == pytest.approx(1.5) and not moved


def test_process_reward_is_bounded_by_the_outcome(results):
    got = results["+ process 0.5"]
    assert got[CLEAN_RIGHT].reward == pytest.approx(1.0)  # a right answer: nothing more to earn
    assert got[CLEAN_WRONG].reward == pytest.approx(0.5)  # the gold was in view: half the way up, no more
    assert got["8 identical searches, wrong answer"].reward == pytest.approx(0.5)  # repeats earn nothing
    assert got["8 identical searches, no answer"].reward == pytest.approx(-2.0)  # a violation earns nothing
    assert got["yes/no gold 'no', passages that say 'no'"].reward == pytest.approx(0.0)  # 'no' is not evidence


def test_role_word_in_retrieved_passages_is_not_a_leak(results):
    row = "'assistant' only in a retrieved passage"
    assert results["stage 2"][row].reward == pytest.approx(1.0)
    # R1-Searcher's reward scans the whole text, documents included: kept in its preset, documented.
    assert results["r1searcher-qwen-stage2"][row].reward == pytest.approx(-1.0)


def test_rewards_md_shows_this_table(results):
    page = gaming.PAGE.read_text(encoding="utf-8")
    assert gaming.page_table(page) == gaming.render(results), "run `python -m tests.gaming` and commit docs/REWARDS.md"
