"""`python launch/check_gpu_install.py`: every step of launch/install_gpu.sh resolved by pip for the GPU platform,
in order, as a dry run. Exit 0 when every step resolves; 1 naming the step, pip's reason and the fix when one does
not; 2 when the check itself cannot run here (no index, no stand-in torch). It needs the index, so it is a CI step
of its own (.ci/run), not a test; tests/test_gpu_install.py runs it against a fake pip.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from launch.gpu_install import sources
from launch.gpu_install.pip import FAST_DEPS, PIP_MIN, PIP_VERSION, PYPI, Pip, Target, bootstrap, pip_version
from launch.gpu_install.run import Failure, Run, SetupError, say
from launch.gpu_install.steps import SCRIPT, Step, StepError, read_steps
from searchrl.paths import ROOT, RUNS

NOT_CHECKED = (
    "the CUDA compile of the source builds (nvcc 13 and a long build on the node), the NVIDIA driver, "
    "and importing vLLM, flash-attn and DeepSpeed on a GPU"
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python launch/check_gpu_install.py",
        description="Resolve every step of launch/install_gpu.sh with pip for the GPU platform without installing: "
        "pip install --dry-run --report per step, later steps holding earlier pins and builds fixed; a source "
        "build's needs checked against the earlier steps and its metadata built with this machine's CPU torch "
        "standing in. Needs the index; ignores this machine's pip config. Exit 0: every step resolves; 1: a step "
        "does not (named, with pip's reason and the fix); 2: the check cannot run here.",
    )
    p.add_argument("--script", type=Path, default=SCRIPT, help="the install script whose steps to check")
    p.add_argument("--python-version", default="3.11", help="the node's Python, X.Y (default 3.11)")
    p.add_argument("--glibc", default="2.35", help="the node's glibc, X.Y (default 2.35: Ubuntu 22.04)")
    p.add_argument("--index-url", default=PYPI, help=f"the index to resolve against (default {PYPI})")
    p.add_argument("--out", type=Path, default=RUNS / "gpu_install", help="logs, reports, summary.json (emptied)")
    p.add_argument(
        "--pip",
        default=None,
        help=f"the pip command to run (default: pip {PIP_VERSION}, installed once into runs/gpu_install_pip)",
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds one pip call may take (default 900)")
    p.add_argument("--steps", action="store_true", help="print the steps as a user types them; resolve nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        steps = read_steps(args.script)
        glibc = parse_glibc(args.glibc)
    except (StepError, OSError, ValueError) as e:
        print(f"[gpu-install] {e}", file=sys.stderr)
        return 2
    if args.steps:
        print("\n".join(s.command for s in steps))
        return 0
    try:
        command = shlex.split(args.pip) if args.pip else bootstrap(RUNS / "gpu_install_pip", args.index_url)
        version = pip_version(command)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        print(f"[gpu-install] {e}", file=sys.stderr)
        return 2
    if version < PIP_MIN:
        print(f"[gpu-install] pip {'.'.join(map(str, version))} is older than 22.3: upgrade it", file=sys.stderr)
        return 2
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    options = [] if args.pip else FAST_DEPS
    pip = Pip(command, args.index_url, args.out / "logs", ROOT, args.timeout, options)
    run = Run(pip, Target(args.python_version, glibc), args.out, args.script)
    shown = ".".join(map(str, version))
    say(f"{len(steps)} steps of {args.script.name} for {run.platform_words()}; pip {shown}, {args.index_url}")
    say(f"  logs, reports and constraints in {args.out}")
    start = time.monotonic()
    for n, step in enumerate(steps, start=1):
        say(f"step {n}/{len(steps)} {step.name}: {step.command}")
        began = time.monotonic()
        try:
            failure = run.step(n, step)
        except (SetupError, OSError, subprocess.SubprocessError) as e:
            print(f"[gpu-install] the check cannot run step {step.name}: {e}", file=sys.stderr)
            return 2
        if failure:
            report_failure(failure, run)
            return 1
        say(f"  ok in {time.monotonic() - began:.0f} s ({len(run.installed)} packages so far)")
    summary = summarize(run, steps, time.monotonic() - start)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0


def parse_glibc(text: str) -> tuple[int, int]:
    parts = text.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"--glibc: expected X.Y such as 2.35, got {text!r}")
    return int(parts[0]), int(parts[1])


def report_failure(failure: Failure, run: Run) -> None:
    step = failure.step
    lines = [f"[gpu-install] FAILED step {step.name} ({run.where(step)}): {step.command}", f"  {failure.what}"]
    lines += [f"  | {line}" for line in failure.reason.splitlines()]
    lines.append(f"  fix: {failure.fix}")
    if failure.log:
        lines.append(f"  pip's full output: {failure.log}")
    print("\n".join(lines), file=sys.stderr, flush=True)


def glibc_floor(urls: list[str]) -> tuple[tuple[int, int], str]:
    """The newest glibc any chosen wheel needs (a file needs the oldest of its own tags), and that file's name."""
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    floor, which = (0, 0), ""
    for url in urls:
        name = url.rsplit("/", 1)[-1]
        needs = []
        for tag in name.removesuffix(".whl").rsplit("-", 1)[-1].split("."):
            parts = tag.split("_")
            if tag.startswith("manylinux_") and len(parts) >= 3 and parts[1].isdigit() and parts[2].isdigit():
                needs.append((int(parts[1]), int(parts[2])))
            elif parts[0] in legacy:
                needs.append(legacy[parts[0]])
        if needs and min(needs) > floor:
            floor, which = min(needs), name
    return floor, which


def summarize(run: Run, steps: list[Step], seconds: float) -> dict:
    floor, which = glibc_floor([i["download_info"]["url"] for i in run.items.values()])
    key = [k for k in ("torch", "vllm", "openrlhf", "flash-attn", "deepspeed", "faiss-gpu") if k in run.installed]
    cuda = sources.cuda_version(run.items)
    say(f"all {len(steps)} steps resolve for {run.platform_words()} in {seconds:.0f} s, {len(run.installed)} packages")
    say(f"  {', '.join(f'{k} {run.installed[k]}' for k in key)}; torch's CUDA {cuda or 'none'}")
    if run.built:
        say(f"  built on the node against step 1's torch: {', '.join(run.built)} (metadata built here)")
    if run.isolated:
        say(f"  pure-Python sdists the node builds in isolation: {', '.join(run.isolated)}")
    if which:
        say(f"  the newest manylinux tag chosen: glibc {floor[0]}.{floor[1]} ({which}); --glibc checks an older node")
    say(f"  not checked here: {NOT_CHECKED}")
    return {
        "steps": [s.command for s in steps],
        "seconds": round(seconds, 1),
        "installed": run.installed,
        "fixed": run.fixed,
        "built_from_source": run.built,
        "pure_python_sdists": run.isolated,
        "torch_cuda": cuda,
        "newest_glibc_tag": f"{floor[0]}.{floor[1]}",
        "not_checked": NOT_CHECKED,
    }
