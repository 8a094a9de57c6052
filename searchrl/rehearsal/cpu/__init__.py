"""The CPU layer of the training rehearsal: what lets OpenRLHF's own `train_ppo_ray` / `train_sft` run
without a GPU. It is never part of a real submission: the rehearsal ships it to the job through
`runtime_env` (`py_modules`, `worker_process_setup_hook`), and nothing else imports it.

- `cuda_shims`: five `torch.cuda` calls OpenRLHF makes unconditionally, answered for the CPU;
- `stubs/vllm`: a stand-in for vLLM (a Hugging Face sampler with vLLM's stop-string and token
  semantics and log-probs, and a gloo stand-in for its NCCL weight-sync communicator);
- `stubs/flash_attn`: the padding helpers OpenRLHF imports from flash-attn for sample packing;
- `deepspeed_ops`: DeepSpeed's shared-memory allreduce left unbuilt (gloo instead), and its CPU FusedAdam built
  ahead of the first job;
- `overrides`: the flags a CPU cannot honour, each with its reason, applied after OpenRLHF's checks.
"""

from __future__ import annotations

from searchrl.rehearsal.cpu import cuda_shims, deepspeed_ops

__all__ = ["activate"]


def activate() -> None:
    """Every Ray worker's set-up hook and the job's driver: the CUDA shims first (they pin DeepSpeed's accelerator
    to the CPU before DeepSpeed is imported), then DeepSpeed's ops."""
    cuda_shims.install()
    deepspeed_ops.install()
