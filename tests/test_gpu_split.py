"""benchmarks/gpu_split.py's graphed decoder, run eagerly on CPU: it must decode what the dynamic-cache loop decodes.

On a GPU the same step is captured as a CUDA graph; the capture cannot run here, but everything the graph records
(the static cache, the in-place mask and position updates, the folded attention) can, and a wrong slot, mask or
head grouping changes the greedy tokens of a tiny random model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from benchmarks import gpu_split


@pytest.fixture(scope="module")
def model() -> Iterator[Any]:
    torch.manual_seed(0)
    # Weights wider than the default init, so attention, not the embedding alone, decides the greedy token.
    m = gpu_split.build_model(torch, torch.device("cpu"), {**gpu_split.TINY, "initializer_range": 0.5})
    m.float().eval()
    yield m
    m.config._attn_implementation = "sdpa"


def test_static_decoder_decodes_what_the_dynamic_loop_decodes(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    folded = gpu_split.folded_sdpa

    def counting(module: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(query.shape[2])
        return folded(module, query, *args, **kwargs)

    monkeypatch.setattr(gpu_split, "folded_sdpa", counting)
    out = gpu_split.graphed_phase(torch, torch.device("cpu"), model, [2], context=24, steps=6)
    # The reference is transformers' own attention: the fold is checked against it, not against itself.
    assert out["agreement"]["all_steps_agreement"] == 1.0, out["agreement"]
    assert model.config._attn_implementation == "sdpa"
    assert out["runs"][0]["cache_length_after"] == 24 + 1 + 6
    # Both the prefill (query length 24) and the one-token steps went through the folded attention's entry.
    assert 1 in calls and 24 in calls


def test_a_wrong_head_grouping_is_caught(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    folded = gpu_split.folded_sdpa

    def misgrouped(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
        # Query heads paired with the wrong KV head: what a transposed fold would do.
        batch, heads, length, dim = query.shape
        if length == 1:
            query = query.view(batch, heads // key.shape[1], key.shape[1], 1, dim).transpose(1, 2)
            query = query.reshape(batch, heads, 1, dim)
        return folded(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setattr(gpu_split, "folded_sdpa", misgrouped)
    out = gpu_split.graph_agreement(torch, torch.device("cpu"), model, 4, 24, 6)
    model.config._attn_implementation = "sdpa"
    assert out["all_steps_agreement"] < 1.0
