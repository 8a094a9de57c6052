"""benchmarks/async_projection.py's step model: colocated sync pays generation and training one after the other on
all GPUs, async on the split node pays the longer of the two on half; the crossover is where they meet."""

from __future__ import annotations

import pytest

from benchmarks.async_projection import crossover_latency, episode_shape, step_times

SHAPE = {"policy_tokens_mean": 300.0, "policy_tokens_max": 600.0, "document_tokens_mean": 2000.0}
RATES = {"train_tokens_per_s": 10_000.0, "logprob_tokens_per_s": 40_000.0, "prefill_tokens_per_s": 40_000.0,
         "decode_batch": 256}  # fmt: skip


def test_training_bound_steps_favour_colocated_sync_and_slow_search_favours_async():
    fast = step_times(SHAPE, RATES, latency_s=0.0, decode_step_s=0.005, sync_s=5.0, critical_searches=8)
    assert fast["training_8_s"] > fast["generation_8_s"] and fast["async_over_sync"] < 1
    # Sync: generation + training + sync on eight; async: the longer of the two on four, + sync.
    assert fast["sync_step_s"] == pytest.approx(fast["generation_8_s"] + fast["training_8_s"] + 5.0)
    assert fast["async_4_4_step_s"] == pytest.approx(2 * fast["training_8_s"] + 5.0)
    slow = step_times(SHAPE, RATES, latency_s=10.0, decode_step_s=0.005, sync_s=5.0, critical_searches=8)
    assert slow["critical_path_s"] == pytest.approx(600 * 0.005 + 80.0) and slow["async_over_sync"] > 1
    cross = crossover_latency(SHAPE, RATES, 0.005, 5.0, 8)
    assert cross is not None and 0 < cross < 10
    at = step_times(SHAPE, RATES, latency_s=cross, decode_step_s=0.005, sync_s=5.0, critical_searches=8)
    assert at["async_over_sync"] == pytest.approx(1.0, abs=0.01)


def test_episode_shape_reads_the_released_trajectories():
    shape = episode_shape()
    assert shape["trajectories"] > 100 and 1 <= shape["searches_mean"] <= shape["searches_max"] <= 8
    assert shape["document_tokens_mean"] > shape["policy_tokens_mean"] > 0
