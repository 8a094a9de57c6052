"""Where a reward request's time goes, counted in instructions: valgrind's callgrind counts every instruction the
server process executes, exactly and repeatably, where CPU time on a shared 2-core machine moves by 10-20%.

Each endpoint of benchmarks/reward_server.py (the reward endpoint, the trivial one and FastAPI's echo) is counted
twice: served by uvicorn under callgrind at concurrency 64 (the load generator outside it), and driven through its
ASGI interface in process with no sockets. Instruction counts do not include the kernel (syscalls, TCP), which
the served CPU time does. The reward endpoint's own instructions (reward less trivial, in process) are split by
the kind of work each function does. Writes the `instructions` section of benchmarks/results/reward_server.json.

    python -m benchmarks.reward_instructions [--served 1500] [--in-process 500] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.loadgen import closed_loop  # noqa: E402
from benchmarks.reward_server import TRAJECTORIES, agent_bodies  # noqa: E402
from searchrl.paths import ROOT  # noqa: E402
from searchrl.process import free_port  # noqa: E402

OUT = ROOT / "benchmarks/results/reward_server.json"
ENDPOINTS = {"reward endpoint": "get_reward", "trivial endpoint": "trivial", "FastAPI echo endpoint": "echo"}
# A function's kind, from its name or its library: the first pattern that matches.
KINDS = [
    ("JSON: parsing the body and building its strings", r"jiter|StringDecoder|unicode_decode_utf8|from_utf8|FromUCS"),
    ("regular expressions (tag counts, answer normalisation)", r"\bsre_|_sre"),
    (
        "string searches and copies (find, count, split, join, slices)",
        r"fastsearch|find_slice|count|split|Join|memcpy|memmove|memchr|unicode_result|PyUnicode_Substring|resize",
    ),
    ("pydantic (request model, response)", r"pydantic"),
    ("memory allocation", r"malloc|Malloc|_int_free|_PyObject_Free|PyObject_GC_Del|dealloc|memset|obmalloc"),
    ("dicts and attribute lookups", r"dict|Dict|unicodekeys|siphash|_PyType_Lookup|GetAttr"),
    (
        "the interpreter running the Python code",
        r"_PyEval|[Ff]rame|initialize_locals|_Py_NewReference|GC_Link|GC_New|Vectorcall|call|Function",
    ),
]


def callgrind_tools() -> tuple[str, str]:
    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if not valgrind or not control:
        raise SystemExit("counting instructions needs valgrind (Debian: apt install valgrind); it is not on PATH")
    return valgrind, control


def control(tool: str, pid: int, *args: str) -> None:
    subprocess.run([tool, *args, str(pid)], check=True, capture_output=True, timeout=120)


def dumps(work: Path, pid: int, prefix: str) -> dict[str, Path]:
    """Each dump of a callgrind process, by the name it was dumped with."""
    found = {}
    for path in work.glob(f"{prefix}.{pid}.out.*"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if (m := re.search(r"^desc: Trigger: dump (\S+)", text, re.M)) is not None:
            found[m.group(1)] = path
    return found


def total_instructions(path: Path) -> int:
    text = path.read_text(encoding="utf-8", errors="replace")
    m = re.search(r"^(?:totals|summary):\s+(\d+)", text, re.M)
    if m is None:
        raise RuntimeError(f"{path}: no instruction total")
    return int(m.group(1))


def by_function(path: Path) -> Counter[str]:
    """Instructions per function (`file:function [library]`), from callgrind_annotate."""
    tool = shutil.which("callgrind_annotate") or "callgrind_annotate"
    text = subprocess.run([tool, "--threshold=100", str(path)], capture_output=True, text=True, check=True).stdout
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)", line)
        if m and "PROGRAM TOTALS" not in line:
            counts[m.group(2)] += int(m.group(1).replace(",", ""))
    return counts


def kind_of(function: str) -> str:
    return next(
        (kind for kind, pattern in KINDS if re.search(pattern, function)),
        "other interpreter work (building tuples, lists and numbers, iteration, argument parsing)",
    )


def served(valgrind: str, tool: str, bodies: list[bytes], n: int, concurrency: int, work: Path) -> dict[str, float]:
    """Instructions per request of each endpoint served by uvicorn under callgrind."""
    import httpx

    out: dict[str, float] = {}
    for flag, names in (("--serve", ["get_reward", "trivial"]), ("--serve-echo", ["echo"])):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        prefix = flag.strip("-")
        cmd = [valgrind, "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={work}/{prefix}.%p.out"]
        cmd += [sys.executable, "-m", "benchmarks.reward_server", flag, str(port)]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 900  # a Python server starts 50-100x slower under callgrind
            while True:
                try:
                    answer = httpx.post(
                        f"{url}/{names[0]}",
                        content=bodies[0],
                        headers={"content-type": "application/json"},
                        timeout=60,
                    )
                    if answer.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{' '.join(cmd)} did not start")
                time.sleep(2)
            for name in names:
                asyncio.run(closed_loop(url, f"/{name}", bodies, concurrency, 1e9, ok_prefix=b"{", max_requests=300))
                control(tool, proc.pid, "-i", "on")
                control(tool, proc.pid, "-z")
                result = asyncio.run(
                    closed_loop(
                        url, f"/{name}", bodies, concurrency, 1e9, ok_prefix=b"{", max_requests=n, timeout_s=900
                    )
                )
                control(tool, proc.pid, "-d", name)
                control(tool, proc.pid, "-i", "off")
                if result.errors or result.requests != n:
                    raise RuntimeError(f"/{name}: {result.requests} served, {result.errors} errors")
                print(f"served /{name}: counted {n} requests", flush=True)
            found = dumps(work, proc.pid, prefix)
            for name in names:
                out[name] = total_instructions(found[name]) / n
        finally:
            proc.terminate()
            proc.wait(60)
    return out


def in_process(valgrind: str, tool: str, n: int, work: Path) -> tuple[dict[str, float], dict[str, Counter[str]]]:
    """Instructions per request of each endpoint driven through its ASGI interface, and per function."""
    cmd = [valgrind, "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={work}/asgi.%p.out"]
    cmd += [sys.executable, "-m", "benchmarks.reward_instructions", "--asgi-worker"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the in-process worker did not start under callgrind")
        for name in ENDPOINTS.values():
            control(tool, proc.pid, "-i", "on")
            control(tool, proc.pid, "-z")
            proc.stdin.write(f"{name} {n}\n")
            proc.stdin.flush()
            if proc.stdout.readline().strip() != "done":
                raise RuntimeError(f"the in-process worker failed on {name}")
            control(tool, proc.pid, "-d", name)
            control(tool, proc.pid, "-i", "off")
            print(f"in process /{name}: counted {n} requests", flush=True)
        found = dumps(work, proc.pid, "asgi")
    finally:
        proc.stdin.close()
        proc.wait(300)
    totals = {name: total_instructions(found[name]) / n for name in ENDPOINTS.values()}
    functions = {name: by_function(found[name]) for name in ENDPOINTS.values()}
    return totals, functions


def asgi_worker() -> None:
    """Runs under callgrind: builds the apps, warms them, then per stdin line `ENDPOINT N` drives N requests."""
    import os

    from benchmarks.reward_server import PRESET, _asgi_post, bench_app, echo_app
    from reward_server.app import SETTINGS_ENV, ServerSettings
    from searchrl.reward.spec import PRESETS

    os.environ[SETTINGS_ENV] = ServerSettings(spec=PRESETS[PRESET], preset=PRESET).to_env()
    bodies = agent_bodies([json.loads(line) for line in TRAJECTORIES.open()])
    apps = {"get_reward": bench_app(), "trivial": bench_app(), "echo": echo_app()}

    async def drive(name: str, n: int) -> None:
        for i in range(n):
            await _asgi_post(apps[name], f"/{name}", bodies[i % len(bodies)])

    for name in apps:
        asyncio.run(drive(name, 50))
    print("ready", flush=True)
    for line in sys.stdin:
        name, n = line.split()
        asyncio.run(drive(name, int(n)))
        print("done", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--served", type=int, default=1500, help="requests counted per served endpoint")
    p.add_argument("--in-process", type=int, default=500, help="requests counted per endpoint in process")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--out", type=Path, default=OUT, help="the reward benchmark's JSON, whose section this writes")
    p.add_argument("--asgi-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.asgi_worker:
        asgi_worker()
        return 0
    valgrind, tool = callgrind_tools()
    if not args.out.is_file():
        raise SystemExit(f"--out {args.out}: run `python -m benchmarks.reward_server` first (this adds a section)")
    bodies = agent_bodies([json.loads(line) for line in TRAJECTORIES.open()])
    version = subprocess.run([valgrind, "--version"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="searchrl-callgrind-") as tmp:
        work = Path(tmp)
        served_counts = served(valgrind, tool, bodies, args.served, args.concurrency, work)
        asgi_counts, functions = in_process(valgrind, tool, args.in_process, work)
    reward, trivial = functions["get_reward"], functions["trivial"]
    own: Counter[str] = Counter()
    for function in set(reward) | set(trivial):
        own[kind_of(function)] += (reward[function] - trivial[function]) / args.in_process
    section: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "tool": version,
        "served_requests": args.served,
        "concurrency": args.concurrency,
        "in_process_requests": args.in_process,
        "served": {label: round(served_counts[name]) for label, name in ENDPOINTS.items()},
        "in_process": {label: round(asgi_counts[name]) for label, name in ENDPOINTS.items()},
        "reward_own_work_by_kind": {kind: round(v) for kind, v in own.most_common()},
    }
    result = json.loads(args.out.read_text(encoding="utf-8"))
    result["instructions"] = section
    args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(json.dumps(section, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
