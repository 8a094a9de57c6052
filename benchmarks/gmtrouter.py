"""GMTRouter's personalised router against popularity and a non-personalised router, on held-out data.

    python -m benchmarks.gmtrouter [--seen-users 300] [--new-users 100] [--epochs 60] [--seeds 0,1,2]
        [--out benchmarks/results/gmtrouter.json] [--png benchmarks/results/gmtrouter.png]

Synthetic users (routing/gmtrouter/synthetic.py: persona taste x topic skill, noisy ratings).
The router trains on the earliest 70% of the seen users' sessions; it is scored on those users' later
sessions and on new users, whose first 3 sessions are their only context. Preference accuracy and
NDCG@3 for the three methods side by side, per seed, and the personalised router's margins.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]

from routing.gmtrouter.evaluate import METHODS, heldout_experiment  # noqa: E402
from routing.gmtrouter.train import TrainConfig  # noqa: E402

SPLITS = {"seen_users_later_sessions": "seen users, later sessions", "new_users": "new users (3 sessions)"}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric in zip(axes, ("preference_accuracy", "ndcg@3"), strict=True):
        width = 0.25
        for j, method in enumerate(METHODS):
            means = [result["mean"][split][method][metric] for split in SPLITS]
            ax.bar([i + (j - 1) * width for i in range(len(SPLITS))], means, width, label=method.replace("_", "-"))
        ax.set_xticks(range(len(SPLITS)), list(SPLITS.values()))
        ax.set_ylabel(metric.replace("_", " ") + f" (mean of {len(result['seeds'])} seeds)")
        low = min(result["mean"][s][m][metric] for s in SPLITS for m in METHODS)
        ax.set_ylim(max(0.0, low - 0.1), 1.0)
    axes[0].legend(loc="upper left")
    fig.suptitle(f"GMTRouter on held-out synthetic users ({result['date']}, {result['machine']['cpus']} CPU cores)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seen-users", type=int, default=300)
    p.add_argument("--new-users", type=int, default=100)
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gmtrouter.json")
    p.add_argument("--png", type=Path, default=ROOT / "benchmarks" / "results" / "gmtrouter.png")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = []
    for seed in seeds:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            report = heldout_experiment(
                args.seen_users, args.new_users, seed, TrainConfig(epochs=args.epochs, seed=seed), Path(tmp) / "ck"
            )
        run = {"seed": seed, "seconds": round(time.perf_counter() - t0, 1)}
        for split in SPLITS:
            run[split] = {"overall": report[split]["overall"], "margins": report[split]["margins"]}
        runs.append(run)
        print(json.dumps({k: v for k, v in run.items() if k != "seconds"} | {"seconds": run["seconds"]}), flush=True)

    def mean(values: list[float]) -> float:
        return round(sum(values) / len(values), 4)

    metrics = ("preference_accuracy", "ndcg@3")
    result = {
        "date": dt.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "settings": {
            "seen_users": args.seen_users,
            "new_users": args.new_users,
            "epochs": args.epochs,
            "train_fraction": 0.7,
            "new_user_context_sessions": 3,
        },
        "seeds": seeds,
        "mean": {
            split: {m: {k: mean([r[split]["overall"][m][k] for r in runs]) for k in metrics} for m in METHODS}
            for split in SPLITS
        },
        "min_margin": {
            split: {
                base: {k: round(min(r[split]["margins"][f"over_{base}"][k] for r in runs), 4) for k in metrics}
                for base in METHODS[1:]
            }
            for split in SPLITS
        },
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.png)
    for split, label in SPLITS.items():
        row = "  ".join(f"{m} {result['mean'][split][m]['preference_accuracy']:.3f}" for m in METHODS)
        print(f"{label}: preference accuracy {row}; min margin {result['min_margin'][split]}")
    print(f"wrote {args.out} and {args.png}")


if __name__ == "__main__":
    main()
