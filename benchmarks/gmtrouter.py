"""GMTRouter's personalised router, the paper's HGT model beside the SAGE baseline, against popularity and a
non-personalised router, on held-out data.

    python -m benchmarks.gmtrouter [--seen-users 300] [--new-users 100] [--models hgt,sage] [--seeds 0,1,2]
        [--hgt-epochs 350] [--sage-epochs 60] [--out benchmarks/results/gmtrouter.json]
        [--png benchmarks/results/gmtrouter.png]

Synthetic users (searchrl/routing/gmtrouter/synthetic.py: persona taste x topic skill, noisy ratings).
Each router trains on the earliest 70% of the seen users' sessions (HGT keeps its best epoch by the
validation AUC of the latest 10% of those); it is scored on those users' later sessions and on new
users, whose first 3 sessions are their only context. Per seed the models train one after the other
on the same data; the original's metrics (accuracy, AUC, per-user AUC) and NDCG@3 for each router,
its non-personalised twin and popularity, and the personalised routers' margins.
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

from searchrl.paths import ROOT  # noqa: E402
from searchrl.routing.gmtrouter.evaluate import METHODS, PAIR_METRICS, heldout_experiment  # noqa: E402
from searchrl.routing.gmtrouter.train import TrainConfig  # noqa: E402

SPLITS = {"seen_users_later_sessions": "seen users, later sessions", "new_users": "new users (3 sessions)"}
METRICS = (*PAIR_METRICS, "ndcg@3")


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = [(f"{m} personalised", m, "personalised") for m in result["models"]]
    bars += [(f"{m} non-personalised", m, "non_personalised") for m in result["models"]]
    bars.append(("popularity", result["models"][0], "popularity"))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric in zip(axes, ("accuracy", "auc"), strict=True):
        width = 0.8 / len(bars)
        for j, (label, model, method) in enumerate(bars):
            means = [result["mean"][model][split][method][metric] for split in SPLITS]
            ax.bar([i + (j - len(bars) / 2 + 0.5) * width for i in range(len(SPLITS))], means, width, label=label)
        ax.set_xticks(range(len(SPLITS)), list(SPLITS.values()))
        ax.set_ylabel(f"{metric} (mean of {len(result['seeds'])} seeds)")
        low = min(result["mean"][m][s][k][metric] for _, m, k in bars for s in SPLITS)
        ax.set_ylim(max(0.0, low - 0.1), 1.0)
    axes[0].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"GMTRouter on held-out synthetic users ({result['date']}, {result['machine']['cpus']} CPU cores)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seen-users", type=int, default=300)
    p.add_argument("--new-users", type=int, default=100)
    p.add_argument("--models", default="hgt,sage", help="routers to train side by side (hgt: the paper's)")
    p.add_argument("--hgt-epochs", type=int, default=350)
    p.add_argument("--sage-epochs", type=int, default=60)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gmtrouter.json")
    p.add_argument("--png", type=Path, default=ROOT / "benchmarks" / "results" / "gmtrouter.png")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    epochs = {"hgt": args.hgt_epochs, "sage": args.sage_epochs}
    runs = []
    for seed in seeds:
        run: dict = {"seed": seed}
        for model in models:
            t0 = time.perf_counter()
            cfg = TrainConfig(model=model, epochs=epochs[model], seed=seed)
            with tempfile.TemporaryDirectory() as tmp:
                report = heldout_experiment(args.seen_users, args.new_users, seed, cfg, Path(tmp) / "ck")
                chosen = json.loads((Path(tmp) / "ck" / "config.json").read_text())["selection"].get("personalised")
            run[model] = {"seconds": round(time.perf_counter() - t0, 1)}
            if chosen:
                run[model]["kept_epoch"] = chosen["epoch"]
            for split in SPLITS:
                run[model][split] = {"overall": report[split]["overall"], "margins": report[split]["margins"]}
            print(json.dumps({"seed": seed, "model": model, **run[model]}), flush=True)
        runs.append(run)

    def mean(values: list[float]) -> float:
        return round(sum(values) / len(values), 4)

    result = {
        "date": dt.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "settings": {
            "seen_users": args.seen_users,
            "new_users": args.new_users,
            "epochs": {m: epochs[m] for m in models},
            "train_fraction": 0.7,
            "new_user_context_sessions": 3,
        },
        "models": models,
        "seeds": seeds,
        "seconds": {m: mean([r[m]["seconds"] for r in runs]) for m in models},
        "mean": {
            m: {
                split: {k: {x: mean([r[m][split]["overall"][k][x] for r in runs]) for x in METRICS} for k in METHODS}
                for split in SPLITS
            }
            for m in models
        },
        "min_margin": {
            m: {
                split: {
                    base: {x: round(min(r[m][split]["margins"][f"over_{base}"][x] for r in runs), 4) for x in METRICS}
                    for base in METHODS[1:]
                }
                for split in SPLITS
            }
            for m in models
        },
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.png)
    for m in models:
        for split, label in SPLITS.items():
            row = "  ".join(f"{k} {result['mean'][m][split][k]['accuracy']:.3f}" for k in METHODS)
            print(f"{m} {label}: accuracy {row}; min margin {result['min_margin'][m][split]}")
    print(f"wrote {args.out} and {args.png}")


if __name__ == "__main__":
    main()
