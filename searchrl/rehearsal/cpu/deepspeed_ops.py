"""DeepSpeed's C++ ops on the CPU accelerator: one skipped, one built ahead of the first job.

On GPUs, DeepSpeed's FusedAdam is a CUDA kernel and ranks reduce over NCCL. On its CPU accelerator DeepSpeed
JIT-compiles two C++ ops on first use, once per machine and virtual environment: a CPU FusedAdam (about 40 s of
`g++ -O3` on a 2-core machine) and a shared-memory allreduce (about 26 s).
- The shared-memory op is not built: the rehearsal's DeepSpeed groups hold one rank each, and without it
  collectives go over gloo, the path DeepSpeed takes wherever the op is unavailable.
- FusedAdam stays (OpenRLHF's sleep mode offloads only FusedAdam's states). `python -m
  searchrl.rehearsal.cpu.prebuild` builds it, which set-up starts in the background after a fresh install, so
  the first training job finds it built; a job that starts meanwhile waits on the build's lock.
"""

from __future__ import annotations

import importlib

NOTES = (
    "DeepSpeed's shared-memory allreduce op not built: one rank per DeepSpeed group here, collectives over gloo "
    "(a C++ build of ~26 s on each fresh machine)",
)


def install() -> None:
    """Patch DeepSpeed in this process, if it is installed; idempotent."""
    try:
        # By module path: the package `deepspeed.comm` also binds the name `torch` to torch itself.
        ds_comm = importlib.import_module("deepspeed.comm.torch")
    except ImportError:
        return
    ds_comm.build_shm_op = _no_shm_op


def _no_shm_op() -> None:
    return None
