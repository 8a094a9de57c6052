"""A stand-in for vLLM on CPU: the slice of its API that OpenRLHF 0.11.2 calls, over a Hugging Face
sampler (`searchrl.rehearsal.cpu.sampler`). It reports vLLM 0.29.0, OpenRLHF's pin, so OpenRLHF takes the
code paths it takes with the real engine. Shipped only to the CPU rehearsal's jobs (`py_modules`)."""

from __future__ import annotations

from vllm.engine import AsyncEngineArgs, AsyncLLMEngine
from vllm.outputs import CompletionOutput, Logprob, RequestOutput
from vllm.sampling_params import SamplingParams

__version__ = "0.29.0"

__all__ = ["AsyncEngineArgs", "AsyncLLMEngine", "CompletionOutput", "Logprob", "RequestOutput", "SamplingParams"]
