"""`python -m searchrl.rehearsal.cpu.prebuild`: build (or load) DeepSpeed's CPU FusedAdam op ahead of the first
training job. Set-up runs it in the background after a fresh install (see deepspeed_ops), as soon as DeepSpeed is in
and before the rest is: it imports nothing else."""

from __future__ import annotations

import os
import sys
import time


def prebuild() -> float:
    """Build or load the op; returns the seconds it took."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    # torch builds with the `ninja` found on PATH, and ninja rebuilds what another ninja version logged: the Ray
    # head puts the venv's bin (pip's ninja 1.13) first on its workers' PATH, and a bare `python -m` here found the
    # system's (1.11), so the first training job of every fresh clone rebuilt the op (45 s). Same PATH, same ninja.
    # As searchrl.process.venv_first makes it (not imported: set-up runs this before httpx and the rest are in).
    os.environ["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"
    from deepspeed.accelerator import get_accelerator

    start = time.monotonic()
    get_accelerator().create_op_builder("FusedAdamBuilder").load(verbose=False)
    return time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        print(__doc__)
        return 0 if argv[0] in ("-h", "--help") else 2
    print(f"[setup] DeepSpeed's CPU FusedAdam op ready ({prebuild():.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
