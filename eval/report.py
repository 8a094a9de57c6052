"""Reports across the datasets of one output folder: a Markdown table and a PNG figure."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

METRICS = ("em", "cem", "f1", "acc_l")


def _summaries(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.summary.json"))]


def markdown(summaries: list[dict]) -> str:
    cols = [m for m in METRICS if any(m in s for s in summaries)]
    head = "| dataset | n | " + " | ".join(c.upper() for c in cols) + " | searches/q | no answer |"
    rows = [head, "|---|---|" + "---|" * len(cols) + "---|---|"]
    for s in summaries:
        cells = [f"{100 * s[c]:.1f}" if c in s else "" for c in cols]
        rows.append(
            f"| {s['dataset']} | {s['n']} | " + " | ".join(cells) + f" | {s['mean_searches']:.2f} | {s['no_answer']} |"
        )
    judge = next((s["judge_model"] for s in summaries if s.get("judge_model")), None)
    note = f"\nACC_L judged by {judge}.\n" if judge else "\n"
    return "\n".join(rows) + "\n" + note


def figure(out: Path, summaries: list[dict]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = [m for m in METRICS if any(m in s for s in summaries)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(1, len(cols))
    for j, metric in enumerate(cols):
        xs = [i + j * width for i in range(len(summaries))]
        bars = left.bar(xs, [100 * s.get(metric, 0) for s in summaries], width, label=metric.upper())
        left.bar_label(bars, fmt="%.1f", fontsize=7)
    left.set_xticks([i + width * (len(cols) - 1) / 2 for i in range(len(summaries))])
    left.set_xticklabels([s["dataset"] for s in summaries])
    left.set_ylabel("%")
    left.set_ylim(0, 105)
    left.set_title("accuracy per dataset")
    left.legend(loc="upper right", fontsize=8)
    counts = []
    for s in summaries:
        with (out / f"{s['dataset']}.jsonl").open() as fh:
            counts.append(Counter(json.loads(line)["num_searches"] for line in fh))
    most = max((max(c) for c in counts if c), default=0)
    bar = 0.8 / max(1, len(summaries))
    for j, (s, c) in enumerate(zip(summaries, counts, strict=True)):
        xs = [x + j * bar for x in range(most + 1)]
        right.bar(xs, [c.get(x, 0) / s["n"] for x in range(most + 1)], bar, label=s["dataset"])
    right.set_xticks([x + bar * (len(summaries) - 1) / 2 for x in range(most + 1)])
    right.set_xticklabels([str(x) for x in range(most + 1)])
    right.set_xlabel("searches per question")
    right.set_ylabel("share of questions")
    right.set_ylim(0, 1)
    right.set_title("searches per question")
    right.legend(fontsize=8)
    fig.tight_layout()
    path = out / "results.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_reports(out: Path) -> None:
    summaries = _summaries(out)
    if not summaries:
        return
    (out / "results.md").write_text(markdown(summaries), encoding="utf-8")
    figure(out, summaries)
