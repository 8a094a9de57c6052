"""`python -m benchmarks.serve --kiltmini DIR`: the retrieval server through Ray Serve against the plain server,
side by side in one run (issue 64 item 5).

The same index (640 held-out kiltmini passages, Flat, the plain server's defaults, no cache) is served three ways at
once: the plain server (`searchrl search serve`), and two Serve applications in a local one-node Ray cluster whose
replicas run that same app (searchrl/ray_serve.py), one with one replica and one with two. Each round measures every
target at every concurrency in a rotating order with closed-loop clients sending one real query a request; a ratio is
taken within a round and the median over rounds is reported, so the machine's load moves both sides of it alike.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from benchmarks.retrieval import QUERIES, TOP_K, Target, _search, block, held_out_index, start_server
from search_backend.serve import ray_deployment
from searchrl.paths import ROOT
from searchrl.process import free_port
from searchrl.ray_serve import NAMESPACE, Placement, application
from searchrl.rehearsal.ray_head import RayHead

HELD_OUT = (3000, 640)
APPS = {"Serve, 1 replica": ("bench-one", "/one", 1), "Serve, 2 replicas": ("bench-two", "/two", 2)}


def deploy(head: RayHead, index_dir: Path, port: int) -> dict[str, tuple[str, str]]:
    """Both Serve applications, each replica a plain server's app over `index_dir`; by target name, the proxy's
    address and the application's route prefix."""
    import ray
    from ray import serve

    ray.init(address=f"127.0.0.1:{head.gcs_port}", namespace=NAMESPACE, log_to_driver=False)
    serve.start(proxy_location="EveryNode", http_options={"host": "127.0.0.1", "port": port})
    argv = ["--index", str(index_dir), "--cache-size", "0"]
    urls = {}
    for name, (app, route, replicas) in APPS.items():
        placement = Placement(replicas=replicas, num_cpus=1)
        serve.run(application("retrieval", ray_deployment.builder(argv), placement), name=app, route_prefix=route)
        urls[name] = (f"http://127.0.0.1:{port}", route)
    return urls


def measure(urls: dict[str, tuple[str, str]], queries: list[str], args: argparse.Namespace) -> dict[str, Any]:
    targets = {
        n: Target("search", "searchrl", f"{route}/search", _search, b'{"results"') for n, (_, route) in urls.items()
    }
    levels = [int(c) for c in args.concurrency.split(",")]
    rates: dict[str, dict[str, list[float]]] = {str(c): {} for c in levels}
    p50: dict[str, dict[str, list[float]]] = {str(c): {} for c in levels}
    errors = 0
    for name, (url, _) in urls.items():
        block(url, targets[name], queries, 8, 2.0)  # warm: encoder, pools, connections
    for r in tqdm(range(args.rounds), desc="rounds"):
        for c in levels:
            names = [n for n in urls if c == max(levels) or n != "Serve, 2 replicas"]
            names = names[r % len(names) :] + names[: r % len(names)]
            for name in names:
                result = block(urls[name][0], targets[name], queries, c, args.seconds)
                rates[str(c)].setdefault(name, []).append(round(result.rps, 1))
                p50[str(c)].setdefault(name, []).append(round(result.p50_ms, 2))
                errors += result.errors
    return {"rates": rates, "p50_ms": p50, "errors": errors}


def ratios(rates: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """Medians over rounds of the within-round ratios."""
    out: dict[str, dict[str, float]] = {}
    for c, by in rates.items():
        plain, one = by["plain server"], by["Serve, 1 replica"]
        out[c] = {"Serve 1 replica / plain": statistics.median(s / p for s, p in zip(one, plain, strict=True))}
        if "Serve, 2 replicas" in by:
            two = by["Serve, 2 replicas"]
            out[c]["Serve 2 replicas / 1 replica"] = statistics.median(t / o for t, o in zip(two, one, strict=True))
    return {c: {k: round(v, 3) for k, v in r.items()} for c, r in out.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--kiltmini", type=Path, required=True, help="directory with passages.jsonl")
    p.add_argument("--queries", type=Path, default=QUERIES, help="one query per line")
    p.add_argument("--concurrency", default="1,16,64")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=2.0, help="length of one block")
    p.add_argument("--work-dir", type=Path, default=ROOT / "runs" / "bench" / "serve")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "serve.json")
    args = p.parse_args(argv)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    index_dir = held_out_index(args.kiltmini, args.work_dir, *HELD_OUT)
    queries = [q for q in args.queries.read_text(encoding="utf-8").splitlines() if q.strip()]
    probe = Target("search", "searchrl", "/search", _search, b'{"results"')
    plain_cmd = [sys.executable, "-m", "search_backend.serve", "--index", str(index_dir), "--cache-size", "0"]
    plain, plain_url = start_server(plain_cmd, probe, args.work_dir / "plain.log")
    head = RayHead(args.work_dir, num_cpus=4, num_gpus=0)
    load_before = os.getloadavg()[0]
    try:
        head.wait()
        urls = {"plain server": (plain_url, ""), **deploy(head, index_dir, free_port())}
        found = measure(urls, queries, args)
    finally:
        import ray

        ray.shutdown()  # before the head goes: a driver left connected waits on its GCS, then aborts the process
        plain.terminate()
        plain.wait(timeout=30)
        head.stop()
    medians = {c: {n: statistics.median(v) for n, v in by.items()} for c, by in found["rates"].items()}
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "gpus": [], "platform": platform.platform()},
        "settings": {
            "passages": HELD_OUT[1],
            "held_out_offset": HELD_OUT[0],
            "queries": len(queries),
            "top_k": TOP_K,
            "rounds": args.rounds,
            "seconds": args.seconds,
            "server": "searchrl search serve --cache-size 0 (defaults otherwise), the same app in every replica",
            "serve": "Ray 2.55 Serve, one local node, proxy on 127.0.0.1, replicas of 1 CPU each",
        },
        "load_average": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "requests_per_s": medians,
        "p50_ms": {c: {n: statistics.median(v) for n, v in by.items()} for c, by in found["p50_ms"].items()},
        "ratios": ratios(found["rates"]),
        "rounds": found["rates"],
        "errors": found["errors"],
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"requests_per_s": medians, "ratios": result["ratios"], "errors": found["errors"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
