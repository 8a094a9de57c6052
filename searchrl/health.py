"""`python -m searchrl.health LOGDIR`: training-health curves from OpenRLHF's TensorBoard logs, and collapse flags.

The agent's `extra_logs` reach TensorBoard as `train/<name>` once per step: search rate (`searched`),
searches per episode, format pass rate and each rule's failure rate, answer length, the share of
episodes hitting the search cap, retrieval latency and errors. A run is flagged when the format
pass rate falls well below its best, or when the search rate falls to about zero after the model had
learned to search: the two ways a search-RL run collapses, and the signals to stop or roll back on.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchrl.curves import read_curves

SIGNALS = (
    "searched",
    "num_searches",
    "format_ok",
    "answer_words",
    "search_capped",
    "search_latency_ms",
    "search_errors",
    "reward",
    "em",
    "f1",
)


@dataclass(frozen=True)
class Thresholds:
    window: int = 10
    format_drop: float = 0.3
    search_floor: float = 0.05
    search_learned: float = 0.3


def _rolling(values: list[float], window: int) -> list[float]:
    return [sum(values[max(0, i - window + 1) : i + 1]) / (i - max(0, i - window + 1) + 1) for i in range(len(values))]


def collapse_flags(curves: dict[str, list[tuple[int, float]]], t: Thresholds) -> list[str]:
    flags = []
    if "format_ok" in curves:
        rolled = _rolling([v for _, v in curves["format_ok"]], t.window)
        if rolled and max(rolled) - rolled[-1] > t.format_drop:
            flags.append(
                f"format collapse: pass rate {rolled[-1]:.2f} over the last {t.window} steps, best {max(rolled):.2f}"
            )
    if "searched" in curves:
        rolled = _rolling([v for _, v in curves["searched"]], t.window)
        if rolled and max(rolled) >= t.search_learned and rolled[-1] < t.search_floor:
            flags.append(
                f"search collapse: search rate {rolled[-1]:.2f} over the last {t.window} steps, best {max(rolled):.2f}"
            )
    return flags


def summary(curves: dict[str, list[tuple[int, float]]]) -> dict[str, dict[str, float]]:
    names = [n for n in curves if n in SIGNALS or n.startswith("violation_")]
    out = {}
    for name in sorted(names):
        values = [v for _, v in curves[name]]
        out[name] = {
            "steps": len(values),
            "first": values[0],
            "last": values[-1],
            "min": min(values),
            "max": max(values),
        }
    return out


# What each curve measures, for the y axis.
UNITS = {
    "searched": "share of episodes",
    "num_searches": "searches / episode",
    "format_ok": "pass rate",
    "answer_words": "words",
    "search_capped": "share of episodes",
    "search_latency_ms": "ms / search",
    "search_errors": "errors / episode",
    "reward": "mean reward",
    "em": "mean EM",
    "f1": "mean F1",
}


def build_figure(curves: dict[str, list[tuple[int, float]]], t: Thresholds = Thresholds()) -> Any:
    """One panel per signal, axes labelled; the format and search panels draw the rolling mean the flags
    read and the thresholds they compare it with."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in SIGNALS if n in curves] + sorted(n for n in curves if n.startswith("violation_"))
    cols = 3
    rows = max(1, -(-len(names) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        steps, values = zip(*curves[name], strict=True)
        ax.plot(steps, values, lw=1, label=name)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel(UNITS.get(name, "share of episodes"), fontsize=8)
        ax.tick_params(labelsize=7)
        rolled = _rolling(list(values), t.window)
        if name == "format_ok" and rolled:
            ax.plot(steps, rolled, lw=1.5, label=f"mean of {t.window} steps")
            ax.axhline(
                max(rolled) - t.format_drop, color="firebrick", ls="--", lw=1, label=f"flag: best - {t.format_drop}"
            )
        elif name == "searched" and rolled:
            ax.plot(steps, rolled, lw=1.5, label=f"mean of {t.window} steps")
            ax.axhline(t.search_learned, color="grey", ls=":", lw=1, label=f"learned: {t.search_learned}")
            ax.axhline(t.search_floor, color="firebrick", ls="--", lw=1, label=f"flag below {t.search_floor}")
        if name in ("format_ok", "searched"):
            ax.legend(fontsize=6, loc="best")
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def plot(curves: dict[str, list[tuple[int, float]]], path: Path, t: Thresholds = Thresholds()) -> None:
    import matplotlib.pyplot as plt

    fig = build_figure(curves, t)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="searchrl health", description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("logdir", type=Path, help="the run's TensorBoard folder (--logger.tensorboard_dir)")
    p.add_argument("--png", type=Path, default=None, help="also plot the curves to this PNG")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--window", type=int, default=10, help="steps averaged for the flags")
    p.add_argument("--format-drop", type=float, default=0.3, help="flag when the pass rate falls this far from best")
    p.add_argument("--search-floor", type=float, default=0.05, help="flag when the search rate falls below this")
    args = p.parse_args(argv)
    try:
        curves = read_curves(args.logdir)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    thresholds = Thresholds(args.window, args.format_drop, args.search_floor)
    flags = collapse_flags(curves, thresholds)
    table = summary(curves)
    if args.png:
        plot(curves, args.png, thresholds)
    if args.json:
        print(json.dumps({"signals": table, "flags": flags}))
    else:
        print(f"{'signal':<32}{'steps':>6}{'first':>10}{'last':>10}{'min':>10}{'max':>10}")
        for name, s in table.items():
            print(f"{name:<32}{s['steps']:>6}{s['first']:>10.3f}{s['last']:>10.3f}{s['min']:>10.3f}{s['max']:>10.3f}")
        print("\n".join(f"FLAG: {f}" for f in flags) or "no collapse flagged")
    return 3 if flags else 0


if __name__ == "__main__":
    sys.exit(main())
