"""Rollout schedules (`schedule: sync|async|async-partial`, `--async`, `--partial-rollout`), checked against OpenRLHF
0.11.2's own parser and the checks train_ppo_ray makes before it starts Ray: the async flags come with the
off-policy correction, the stage files' sleep mode gives way, and what OpenRLHF refuses is refused before a
submit, with its reason."""

from __future__ import annotations

import pytest

from searchrl.job import submit
from searchrl.job.plan import plan_stage
from searchrl.rehearsal.command import build_parser as rehearse_parser
from searchrl.stage.openrlhf_flags import check_args
from searchrl.stage.schedules import gpus_needed


def flags(stage: str, *overrides: str) -> dict:
    return vars(check_args(plan_stage(stage, None, list(overrides))["train_args"]))


@pytest.mark.parametrize("stage", ["stage1", "stage2", "router_r1"])
def test_sync_is_the_default_and_unchanged(stage):
    ns = flags(stage)
    assert ns["train.async_enable"] is False and ns["train.partial_rollout_enable"] is False
    assert ns["algo.advantage.is_correction_level"] == "off"


@pytest.mark.parametrize("stage", ["stage1", "stage2", "router_r1"])
def test_async_brings_its_off_policy_correction_and_no_sleep(stage):
    ns = flags(stage, "schedule=async")
    assert ns["train.async_enable"] is True and ns["train.async_queue_size"] == 1
    assert ns["train.partial_rollout_enable"] is False
    assert (ns["algo.advantage.is_correction_level"], ns["algo.advantage.is_correction_mode"]) == ("token", "mask")
    assert ns["algo.advantage.is_correction_gating"] == "ratio"
    assert list(ns["algo.advantage.is_correction_threshold"]) == [0.5, 5.0]
    assert ns["vllm.enable_sleep"] is False  # the stage files sleep colocated engines: OpenRLHF refuses it here
    partial = flags(stage, "schedule=async-partial")
    assert partial["train.partial_rollout_enable"] is True and partial["train.async_enable"] is True


def test_a_flag_given_with_the_schedule_wins_but_sleep_stays_off():
    ns = flags("stage1", "schedule=async", "openrlhf.train.async_queue_size=2", "openrlhf.vllm.enable_sleep=true")
    assert ns["train.async_queue_size"] == 2 and ns["vllm.enable_sleep"] is False


def test_what_openrlhf_refuses_is_refused_with_its_reason(capsys):
    assert submit.dry_run_main(["stage1", "openrlhf.train.partial_rollout_enable=true"]) == 2
    assert "--train.partial_rollout_enable requires --train.async_enable" in capsys.readouterr().err
    assert submit.dry_run_main(["stage1", "openrlhf.train.async_enable=true"]) == 2  # the stage's sleep mode
    assert "Async RLHF is not supported with --vllm.enable_sleep" in capsys.readouterr().err
    assert submit.dry_run_main(["stage1", "schedule=later"]) == 2
    assert "schedule" in capsys.readouterr().err


def test_dry_run_async_prints_the_flags_and_the_gpus_it_needs(capsys):
    assert submit.dry_run_main(["stage1", "--async"]) == 0
    out = capsys.readouterr().out
    assert "--train.async_enable" in out and "--algo.advantage.is_correction_level token" in out
    assert "--train.partial_rollout_enable" not in out and "--vllm.enable_sleep" not in out
    assert "# schedule async: 16 GPUs" in out  # the stage's 8 actor GPUs and, beside them, its 8 engines
    halves = ["openrlhf.vllm.num_engines=4", "openrlhf.actor.num_gpus_per_node=4", "openrlhf.ref.num_gpus_per_node=4"]
    assert submit.dry_run_main(["stage1", "--partial-rollout", *halves]) == 0
    out = capsys.readouterr().out
    assert "--train.partial_rollout_enable" in out and "# schedule async-partial: 8 GPUs" in out
    assert submit.dry_run_main(["stage1"]) == 0 and "# schedule sync: 8 GPUs" in capsys.readouterr().out
    assert submit.dry_run_main(["sft", "--async"]) == 2


def test_gpus_needed_follows_openrlhfs_placement():
    base = {"actor.num_nodes": 1, "actor.num_gpus_per_node": 8, "ref.num_nodes": 1, "ref.num_gpus_per_node": 8}
    engines = {"vllm.num_engines": 8, "vllm.tensor_parallel_size": 2}
    assert gpus_needed({**base, **engines, "train.colocate_all": True}) == 8
    assert gpus_needed({**base, **engines, "train.colocate_all": True, "train.async_enable": True}) == 24
    assert gpus_needed({**base, **engines}) == 32


def test_rehearse_takes_the_same_switches():
    args = rehearse_parser().parse_intermixed_args(["stage1", "--train", "--partial-rollout", "episode.top_k=2"])
    assert args.schedule == "async-partial" and args.overrides == ["episode.top_k=2"]
