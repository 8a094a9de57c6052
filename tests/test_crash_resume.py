"""A training job killed with kill -9 in the middle of a step, sync and async, then submitted again: it goes on
from its last DeepSpeed checkpoint to the last step, and no step is logged twice (the job logs and TensorBoard).
Through `ray job submit` and OpenRLHF's own train_ppo_ray on CPU, about 4 minutes a schedule on 2 cores: slow,
kept out of the test command; CI runs the sync schedule's crash over 2 steps (.ci/run, `crash-stage1`)."""

from __future__ import annotations

import pytest

from searchrl.rehearsal import training


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["sync", "async-partial"])
def test_a_job_killed_mid_step_resumes_on_resubmission(schedule, tmp_path):
    overrides = [] if schedule == "sync" else [f"schedule={schedule}"]
    result = training.train("stage1", None, overrides, 3, out=tmp_path, crash_after_step=1)
    crash = result["crash"]
    assert crash["killed"] and "driver" in crash["killed"], crash
    assert crash["steps_before_kill"] == [1], crash  # the kill came mid-step 2, before its log line
    assert crash["steps_after_resubmit"] == [2, 3], crash  # from step 1's checkpoint, step 2 redone once
    assert crash["no_step_twice"] and crash["all_steps"] and result["resumed"], crash
    assert result["weights_synced_equal_saved"] and result["extra_logs_keys_consistent"], result
    assert result["trainer"] == ("PPOTrainer" if schedule == "sync" else "PPOTrainerAsync"), result


def test_the_logs_that_ray_job_submit_repeats_after_a_failure_are_not_counted_again(tmp_path):
    """`ray job submit` repeats a failed job's last logs after its "failed" line: a step logged once before the
    kill must read as once (it read as twice in the first run of the crash check over 2 steps, 2026-11-28)."""
    step = "(PPOTrainer pid=1) INFO ppo_trainer.py:551] \u2728 Global step {}: {{'em': 0.1, 'reward': 0.5}}\n"
    log = tmp_path / "job.log"
    log.write_text(
        step.format(1) + "ERR cli.py:74 -- \x1b[31mJob 'raysubmit_abc' failed\x1b[39m\n"
        "Status message: Job entrypoint command failed with exit code -9, last available logs:\n" + step.format(1),
        encoding="utf-8",
    )
    assert training.logged_steps(log) == [1]
    log.write_text(step.format(1) + step.format(2), encoding="utf-8")
    assert training.logged_steps(log) == [1, 2]
