"""Five `torch.cuda` calls that OpenRLHF makes whatever the device, answered for the CPU.

OpenRLHF moves tensors to `torch.cuda.current_device()`, synchronises, empties the cache and passes
`current_stream()` to the weight-sync broadcast. On a CPU-only torch each raises; here the device is
the CPU and the rest are no-ops. Installed in every Ray worker of the rehearsal job (its
`worker_process_setup_hook`) and in the job's driver, nowhere else.
"""

from __future__ import annotations

import os
from typing import Any

INSTALLED_ENV = "SEARCHRL_CPU_LAYER"


class CpuDevice(str):
    """What `current_device()` answers: the string "cpu" to every tensor call (`.to(d)`, `device=d`), but
    the index 0 in a format string, because OpenRLHF's replay buffer also builds `f"cuda:{d}"` (a device
    it constructs and never moves a tensor to)."""

    def __new__(cls) -> CpuDevice:
        return super().__new__(cls, "cpu")

    def __format__(self, spec: str) -> str:
        return format(0, spec)


def _current_device() -> CpuDevice:
    return CpuDevice()


# One function per name: torch's compiler keys its rules by function object and refuses a function
# that stands for two torch.cuda names.
def _set_device(device: Any) -> None:
    return None


def _synchronize(device: Any = None) -> None:
    return None


def _current_stream(device: Any = None) -> None:
    return None


def _empty_cache() -> None:
    return None


def install() -> None:
    """Replace the five calls; idempotent. Also pins DeepSpeed to its CPU accelerator (gloo)."""
    import torch

    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ[INSTALLED_ENV] = "1"
    torch.cuda.set_device = _set_device
    torch.cuda.current_device = _current_device
    torch.cuda.synchronize = _synchronize
    torch.cuda.current_stream = _current_stream
    torch.cuda.empty_cache = _empty_cache
