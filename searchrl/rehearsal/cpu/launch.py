"""`python -m searchrl.rehearsal.cpu.launch MODULE [FLAGS ...]`: run an OpenRLHF entry module
(`openrlhf.cli.train_ppo_ray`, `openrlhf.cli.train_sft`) on CPU, unchanged: its own parser, checks and training code
run as `__main__`.

Before it starts, the CUDA shims and DeepSpeed's CPU ops are installed in this process (Ray workers get them
from the job's `worker_process_setup_hook`). The overrides in `$SEARCHRL_CPU_OVERRIDES` (a JSON list of
`{"flag", "value", "reason"}`) are applied when the module asks for its strategy, which it does after
its checks, so a check cannot undo one (OpenRLHF forces flash-attention whenever samples are packed).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from typing import Any

from searchrl.rehearsal.cpu import activate
from searchrl.rehearsal.cpu.deepspeed_ops import NOTES

OVERRIDES_ENV = "SEARCHRL_CPU_OVERRIDES"


def set_flag(args: Any, flag: str, value: Any) -> Any:
    """Set a dotted OpenRLHF flag (`ds.attn_implementation`) on its nested namespace; returns the old value."""
    *path, leaf = flag.split(".")
    node = args
    for part in path:
        node = getattr(node, part)
    old = getattr(node, leaf, None)
    setattr(node, leaf, value)
    return old


def apply_after_checks(overrides: list[dict[str, Any]]) -> None:
    import openrlhf.utils

    real = openrlhf.utils.get_strategy

    def get_strategy(args: Any) -> Any:
        for o in overrides:
            old = set_flag(args, o["flag"], o["value"])
            note = "" if old == o["value"] else f" (OpenRLHF's checks had set {old!r})"
            print(f"[cpu override] {o['flag']}={o['value']!r}: {o['reason']}{note}", flush=True)
        return real(args)

    openrlhf.utils.get_strategy = get_strategy


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if argv else 2)
    activate()
    for note in NOTES:
        print(f"[cpu override] {note}", flush=True)
    apply_after_checks(json.loads(os.environ.get(OVERRIDES_ENV) or "[]"))
    module, flags = argv[0], argv[1:]
    sys.argv = [module, *flags]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
