"""CPU threads of the query encoder: what `--threads auto` and the OpenMP spin count of the search server rest on.

Two measurements, in processes of their own (a thread count and libgomp's spin count are fixed per process), in
alternating blocks, medians:

- one fewer thread than the cores against every core, beside another process that keeps a share of one core busy
  (0 to 1 core): where every core stops paying is LEND_BELOW in searchrl/search/index/cpu_threads.py;
- every core with libgomp's default spin count against SPIN_COUNT, back to back and with idle time between calls
  (what a server answering one query at a time sees between requests), with the CPU each query costs.

    python -m benchmarks.threads [--rounds 5] [--seconds 1.5] [--out benchmarks/results/threads.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tqdm import tqdm

from searchrl.paths import ROOT

QUERIES = ROOT / "tests/fixtures/search/queries_1000.txt"
OTHER_LOADS = [0.0, 0.1, 0.25, 0.5, 1.0]
PERIOD_S = 0.01  # the busy process's duty cycle: busy for a share of every 10 ms


def worker(threads: int, batch: int) -> None:
    """Encodes `batch` queries per call on `threads` threads; each stdin line `SECONDS IDLE_S` is answered with
    `queries/s CPU-ms-per-query` of one block (the idle time between calls is not counted in the rate)."""
    import torch

    from searchrl.search.encode.encoder import Encoder

    torch.set_num_threads(threads)
    encoder = Encoder()
    queries = [q for q in QUERIES.read_text(encoding="utf-8").splitlines() if q.strip()]
    for i in range(20):
        encoder.encode_queries(queries[i * batch : (i + 1) * batch])
    print("ready", flush=True)
    done = 0
    for line in sys.stdin:
        seconds, idle = (float(x) for x in line.split())
        n, busy, cpu, end = 0, 0.0, time.process_time(), time.perf_counter() + seconds
        while time.perf_counter() < end:
            start = (done * batch) % (len(queries) - batch)
            t0 = time.perf_counter()
            encoder.encode_queries(queries[start : start + batch])
            busy += time.perf_counter() - t0
            n, done = n + batch, done + 1
            if idle:
                time.sleep(idle)
        print(f"{n / busy:.2f} {1000 * (time.process_time() - cpu) / n:.3f}", flush=True)


def busy_process(share: float) -> None:
    """Keeps `share` of one core busy until killed."""
    while True:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < PERIOD_S * share:
            pass
        time.sleep(PERIOD_S * (1 - share))


class Worker:
    def __init__(self, threads: int, batch: int, spin: str | None) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
        env["HF_HUB_OFFLINE"] = "1"
        if spin:
            env["GOMP_SPINCOUNT"] = spin
        cmd = [sys.executable, "-m", "benchmarks.threads", "--worker", str(threads), "--batch", str(batch)]
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{' '.join(cmd)} did not start")

    def block(self, seconds: float, idle_s: float = 0.0) -> tuple[float, float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{seconds} {idle_s}\n")
        self.proc.stdin.flush()
        rate, cpu = self.proc.stdout.readline().split()
        return float(rate), float(cpu)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def medians(samples: dict[str, list[tuple[float, float]]]) -> dict[str, dict[str, float]]:
    return {
        name: {
            "queries_per_s": round(statistics.median(r for r, _ in v), 1),
            "cpu_ms_per_query": round(statistics.median(c for _, c in v), 2),
        }
        for name, v in samples.items()
    }


def beside_other_load(cores: int, batches: list[int], args: argparse.Namespace) -> dict:
    """Queries/s at cores - 1 and at every core beside a process keeping a share of one core busy."""
    from searchrl.search.index.cpu_threads import SPIN_COUNT

    out: dict[str, dict] = {}
    for batch in batches:
        workers = {t: Worker(t, batch, SPIN_COUNT) for t in (max(1, cores - 1), cores)}
        try:
            for share in tqdm(OTHER_LOADS, desc=f"other load, batch {batch}"):
                busy = None
                if share:
                    busy = subprocess.Popen(
                        [sys.executable, "-m", "benchmarks.threads", "--busy", str(share)], cwd=ROOT
                    )
                samples: dict[str, list[tuple[float, float]]] = {f"{t} threads": [] for t in workers}
                try:
                    for r in range(args.rounds):
                        order = list(workers.items())
                        for t, w in order[r % 2 :] + order[: r % 2]:
                            samples[f"{t} threads"].append(w.block(args.seconds))
                finally:
                    if busy is not None:
                        busy.kill()
                        busy.wait()
                m = medians(samples)
                rates = [m[f"{t} threads"]["queries_per_s"] for t in workers]
                out.setdefault(str(batch), {})[str(share)] = {
                    **m,
                    "every_core_over_one_fewer": round(rates[-1] / rates[0], 2),
                }
        finally:
            for w in workers.values():
                w.close()
    return out


def spin_counts(cores: int, args: argparse.Namespace) -> dict:
    """Every core, libgomp's default spin count against SPIN_COUNT, back to back and with idle between calls."""
    from searchrl.search.index.cpu_threads import SPIN_COUNT

    out: dict[str, dict] = {}
    for batch in (1, 16):
        workers = {
            "default spin": Worker(cores, batch, None),
            f"GOMP_SPINCOUNT={SPIN_COUNT}": Worker(cores, batch, SPIN_COUNT),
        }
        try:
            for idle in (0.0, *(ms / 1000 for ms in args.idle_ms)) if batch == 1 else (0.0,):
                samples: dict[str, list[tuple[float, float]]] = {name: [] for name in workers}
                for r in tqdm(range(args.rounds), desc=f"spin, batch {batch}, idle {idle * 1000:g} ms"):
                    order = list(workers.items())
                    for name, w in order[r % 2 :] + order[: r % 2]:
                        samples[name].append(w.block(args.seconds, idle))
                out[f"batch {batch}, {idle * 1000:g} ms idle between calls"] = medians(samples)
        finally:
            for w in workers.values():
                w.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5, help="blocks per variant and point; medians reported")
    p.add_argument("--seconds", type=float, default=1.5, help="length of one block")
    p.add_argument(
        "--idle-ms",
        type=float,
        nargs="+",
        default=[2.0, 20.0],
        help="idle times between calls in the spin comparison (a server's round trip; a sparse caller)",
    )
    p.add_argument("--spin-only", action="store_true", help="re-measure only the spin counts into the existing --out")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/threads.json")
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--busy", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker, args.batch)
        return 0
    if args.busy is not None:
        busy_process(args.busy)
        return 0
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        raise SystemExit("this benchmark compares thread counts: it needs at least 2 cores")
    load_before = os.getloadavg()[0]
    if args.spin_only:
        result = json.loads(args.out.read_text(encoding="utf-8"))
        result["spin_count"] = spin_counts(cores, args)
        result["spin_count_date"] = time.strftime("%Y-%m-%d")
        args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")
        print(json.dumps(result["spin_count"], indent=1))
        return 0
    result = {
        "benchmark": "threads",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {cores} cores, Python {platform.python_version()}",
        "encoder": "all-MiniLM-L6-v2 (the bundled model), queries from tests/fixtures/search/queries_1000.txt",
        "rounds": args.rounds,
        "seconds_per_block": args.seconds,
        "beside_other_load": beside_other_load(cores, [1, 16], args),
        "spin_count": spin_counts(cores, args),
    }
    result["load_average"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
