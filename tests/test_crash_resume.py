"""A training job killed with kill -9 in the middle of a step, sync and async, then submitted again: it goes on
from its last DeepSpeed checkpoint to the last step, and no step is logged twice (the job logs and TensorBoard).
Through `ray job submit` and OpenRLHF's own train_ppo_ray on CPU, about 4 minutes a schedule on 2 cores: slow,
kept out of CI (whose rehearsals check the planned resume of both schedules)."""

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
