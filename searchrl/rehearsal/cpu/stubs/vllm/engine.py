"""`AsyncEngineArgs` and `AsyncLLMEngine` on CPU: the engine OpenRLHF's `RolloutRayActor` builds.

Generation goes to `searchrl.rehearsal.cpu.sampler.BatchSampler`. `collective_rpc` runs OpenRLHF's worker
calls (`init_process_group`, `update_weight`) on a worker holding the model, as vLLM's worker
extension does; sleep and wake-up keep vLLM's states so a call out of order fails as it would there.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import torch

from searchrl.rehearsal.cpu.sampler import BatchSampler
from searchrl.weights import weights_digest
from vllm.outputs import CompletionOutput, Logprob, RequestOutput

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "auto": torch.bfloat16}
# Where each engine writes a digest of its weights after every sync, for the rehearsal's check that
# the engines end with the saved model's weights.
SYNC_LOG_ENV = "SEARCHRL_CPU_SYNC_LOG"


class AsyncEngineArgs:
    def __init__(self, model: str, **kwargs: Any) -> None:
        self.model = model
        self.kwargs = kwargs
        if int(kwargs.get("tensor_parallel_size", 1)) != 1:
            raise ValueError("the CPU stand-in runs one engine per process: set vllm.tensor_parallel_size=1")


class _Worker:
    """vLLM's worker side of OpenRLHF's weight sync (its `WorkerWrap`), for a CPU model."""

    def __init__(self, model: Any, dtype: torch.dtype, engine_seed: int, sampler: BatchSampler) -> None:
        self.model = model
        self.dtype = dtype
        self.engine_seed = engine_seed
        self.sampler = sampler
        self.group: Any = None
        self.synced = 0

    def init_process_group(
        self, master_address, master_port, rank_offset, world_size, group_name, backend="nccl", use_ray=False
    ):
        from openrlhf.utils.distributed_util import stateless_init_process_group

        if use_ray:
            raise ValueError("vllm.sync_with_ray is not rehearsed on CPU: leave it off")
        self.group = stateless_init_process_group(master_address, master_port, rank_offset, world_size, "cpu")

    def update_weight(self, name, dtype, shape, empty_cache=False):
        if dtype != self.dtype:
            raise AssertionError(f"mismatch dtype: src {dtype}, dst {self.dtype}")
        if not self.sampler.quiet:
            # vLLM changes weights only between steps; here a forward pass would read half-copied ones.
            raise RuntimeError("update_weight while a batch generates: OpenRLHF holds the lock or pauses first")
        weight = torch.empty(shape, dtype=dtype)
        self.group.broadcast(weight, src=0)
        params = dict(self.model.named_parameters())
        if name not in params:
            raise KeyError(f"update_weight: the engine's model has no parameter {name!r}")
        params[name].data.copy_(weight)
        if empty_cache:  # OpenRLHF flags the last parameter of a sync this way
            self.synced += 1
            self.sampler.version = self.synced
            self._record()

    def update_weight_cuda_ipc(self, *args: Any, **kwargs: Any):
        raise ValueError("CUDA IPC weight sync needs GPUs: the rehearsal sets vllm.sync_backend=gloo")

    def _record(self) -> None:
        log = os.environ.get(SYNC_LOG_ENV)
        if log:
            entry = {"pid": os.getpid(), "seed": self.engine_seed, "sync": self.synced}
            entry |= {"pauses": self.sampler.pauses, "across_syncs": self.sampler.across_syncs}
            entry["digest"] = weights_digest(self.model.named_parameters())
            with Path(log).open("a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")


class _OutputProcessor:
    def __init__(self, sampler: BatchSampler) -> None:
        self.sampler = sampler

    def get_num_unfinished_requests(self) -> int:
        return self.sampler.unfinished


class AsyncLLMEngine:
    def __init__(self, args: AsyncEngineArgs) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kw = args.kwargs
        self.dtype = DTYPES[str(kw.get("dtype", "bfloat16"))]
        seed = int(kw.get("seed", 0))
        torch.manual_seed(seed)
        self.tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=True)
        self.model = AutoModelForCausalLM.from_pretrained(args.model, dtype=self.dtype, attn_implementation="sdpa")
        self.model.eval()
        max_len = int(kw.get("max_model_len") or self.model.config.max_position_embeddings)
        self.sampler = BatchSampler(self.model, self.tokenizer, max_len, str(kw.get("logprobs_mode") or "raw"))
        self.output_processor = _OutputProcessor(self.sampler)
        self.worker = _Worker(self.model, self.dtype, seed, self.sampler)
        self.enable_sleep = bool(kw.get("enable_sleep_mode", False))
        self.asleep: set[str] = set()
        self.prefix_cache_resets = 0

    @classmethod
    def from_engine_args(cls, args: AsyncEngineArgs) -> AsyncLLMEngine:
        return cls(args)

    async def is_sleeping(self) -> bool:
        return bool(self.asleep)

    async def sleep(self, level: int = 1) -> None:
        if not self.enable_sleep:
            raise ValueError("sleep mode is not enabled (enable_sleep_mode)")
        self.asleep = {"weights", "kv_cache"}

    async def wake_up(self, tags: list[str] | None = None) -> None:
        self.asleep -= set(tags or ["weights", "kv_cache"])

    async def reset_prefix_cache(self) -> None:
        self.prefix_cache_resets += 1

    async def pause_generation(self, mode: str = "keep", clear_cache: bool = True) -> None:
        if mode != "keep":
            raise ValueError(f"pause_generation(mode={mode!r}): the CPU stand-in keeps requests (mode='keep')")
        await self.sampler.pause()

    async def resume_generation(self) -> None:
        self.sampler.resume()

    async def collective_rpc(self, method: str, args: tuple = (), kwargs: dict | None = None) -> list[Any]:
        if method.startswith("update_weight") and "weights" in self.asleep:
            raise RuntimeError("update_weight while the engine's weights are asleep: wake_up(['weights']) first")
        call = getattr(self.worker, method)
        return [await asyncio.to_thread(call, *args, **(kwargs or {}))]

    async def generate(self, prompt: dict, sampling_params: Any, request_id: str) -> AsyncIterator[RequestOutput]:
        if self.asleep:
            raise RuntimeError(f"generate while asleep ({sorted(self.asleep)}): OpenRLHF wakes engines first")
        ids = list(prompt["prompt_token_ids"])
        done = await self.sampler.generate(ids, sampling_params)
        logprobs = None
        if done.logprobs is not None:
            logprobs = [{t: Logprob(lp, rank=1) for t, lp in step.items()} for step in done.logprobs]
        completion = CompletionOutput(
            index=0,
            text=done.text,
            token_ids=done.token_ids,
            cumulative_logprob=done.cumulative_logprob,
            logprobs=logprobs,
            finish_reason=done.finish_reason,
            stop_reason=done.stop_reason,
        )
        yield RequestOutput(request_id=request_id, prompt_token_ids=ids, outputs=[completion])
