"""Named algorithms and stage-2 options, checked against OpenRLHF 0.11.2's own parser: the stages' default is
R1-Searcher's REINFORCE++, `algorithm=grpo` is Search-R1's GRPO as a whole (not under the stage's estimator),
and dynamic filtering is one flag away and off by default."""

from __future__ import annotations

import pytest

from searchrl.job.plan import plan_stage
from searchrl.stage.openrlhf_flags import check_args


def flags(stage: str, *overrides: str) -> dict:
    return vars(check_args(plan_stage(stage, None, list(overrides))["train_args"]))


@pytest.mark.parametrize("stage", ["stage1", "stage2"])
def test_stages_train_with_r1_searchers_reinforce_plus_plus(stage):
    ns = flags(stage)
    assert ns["algo.advantage.estimator"] == "reinforce_baseline" and ns["rollout.n_samples_per_prompt"] == 16
    assert ns["actor.adam.lr"] == 2e-6 and ns["actor.lr_warmup_ratio"] == 0.0 and ns["algo.kl.init_coef"] == 0.0
    assert ns["algo.kl.use_loss"] is False and ns["rollout.batch_size"] == 64 and ns["train.batch_size"] == 256


@pytest.mark.parametrize("stage", ["stage1", "stage2"])
def test_grpo_swaps_the_whole_algorithm(stage):
    ns = flags(stage, "algorithm=grpo")
    assert ns["algo.advantage.estimator"] == "group_norm" and ns["rollout.n_samples_per_prompt"] == 5
    assert ns["actor.adam.lr"] == 1e-6 and ns["actor.lr_warmup_ratio"] == 0.285
    assert ns["algo.kl.use_loss"] is True and ns["algo.kl.estimator"] == "k3" and ns["algo.kl.init_coef"] == 0.001
    # the stage's own layout stays
    assert ns["rollout.batch_size"] == 64 and ns["train.colocate_all"] is True


def test_a_flag_given_with_the_algorithm_still_wins():
    assert (
        flags("stage2", "algorithm=grpo", "openrlhf.rollout.n_samples_per_prompt=16")["rollout.n_samples_per_prompt"]
        == 16
    )


def test_dynamic_filtering_is_a_stage2_option_off_by_default():
    assert flags("stage2")["algo.dynamic_filtering_enable"] is False
    ns = flags("stage2", "openrlhf.algo.dynamic_filtering_enable=true")
    assert ns["algo.dynamic_filtering_enable"] is True and list(ns["algo.dynamic_filtering_range"]) == [0.0, 1.0]
