"""benchmarks/async_rollout.py's figures from a rehearsal's result: the steady pace (start-up left out), the
trainer's busy share, the off-policy figures, and the ratio of each schedule to sync per latency."""

from __future__ import annotations

import pytest

from benchmarks.async_rollout import overlap_bound, pace, ratios


def result(clock: list[float], train_s: float, async_: bool) -> dict:
    curves = {
        str(i + 1): {
            "timing/generation": 5.0,
            "timing/make_experience": 1.0,
            "timing/ppo_train": train_s,
            **({"vllm_kl": 0.1, "is_filter_ratio": 0.05} if async_ else {}),
        }  # fmt: skip
        for i in range(len(clock))
    }
    flags = [{"flag": "rollout.batch_size", "value": 8}, {"flag": "rollout.n_samples_per_prompt", "value": 8}]
    return {"step_clock": clock, "curves": curves, "overrides": flags, "score_last": 0.5}


def test_pace_counts_the_steps_after_the_first_over_their_time():
    got = pace(result([0.0, 20.0, 40.0, 60.0], 9.0, False))
    assert got["steps_per_hour"] == 180.0 and got["samples_per_hour"] == 180.0 * 64
    assert got["trainer_busy_share"] == pytest.approx(3 * 10.0 / 60.0, abs=1e-3)
    assert got["mean_step_split_s"]["generation"] == 5.0 and "vllm_kl" not in got
    fast = pace(result([0.0, 12.0, 24.0], 9.0, True))
    assert fast["trainer_busy_share"] == pytest.approx(20 / 24, abs=1e-3) and fast["is_filter_ratio"] == 0.05
    assert pace(result([0.0], 9.0, False))["steps_per_hour"] is None


def test_ratios_are_per_latency_against_the_first_schedule():
    runs = [
        {"latency_s": 2.0, "schedule": "sync", "samples_per_hour": 1000.0, "heldout_score": 0.7},
        {"latency_s": 2.0, "schedule": "async-partial", "samples_per_hour": 1600.0, "heldout_score": 0.65},
        {"latency_s": 0.0, "schedule": "sync", "samples_per_hour": 2000.0},
        {"latency_s": 0.0, "schedule": "async-partial", "samples_per_hour": 2100.0},
    ]
    got = ratios(runs, ["sync", "async-partial"])
    assert got[0] == {"latency_s": 0.0, "schedule": "async-partial", "against": "sync", "samples_per_hour_ratio": 1.05}
    assert got[1]["samples_per_hour_ratio"] == 1.6 and got[1]["heldout_score_gap"] == pytest.approx(-0.05)


def test_overlap_bound_is_the_step_over_what_no_schedule_can_hide():
    # A sync step: 5 s generating (mostly search waits), 9.5 s of trainer work, 0.5 s broadcast.
    split = {"generation": 5.0, "make_experience": 1.5, "ppo_train": 8.0, "broadcast": 0.5, "step_total": 15.0}
    assert overlap_bound(split) == pytest.approx(1.5)
    assert overlap_bound({"generation": 5.0}) is None
    runs = [
        {"latency_s": 2.0, "schedule": "sync", "samples_per_hour": 1000.0, "mean_step_split_s": split},
        {"latency_s": 2.0, "schedule": "async-partial", "samples_per_hour": 1400.0,
         "mean_step_split_s": {**split, "generation": 9.0, "step_total": 12.0}},
    ]  # fmt: skip
    assert ratios(runs, ["sync", "async-partial"])[0]["sync_overlap_bound"] == pytest.approx(1.5)
