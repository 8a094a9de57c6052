"""Reports across the datasets of one output folder: a Markdown table and a PNG figure.

The columns follow R1-Searcher's paper: ACC_R is cover-EM (the gold answer's tokens all appear in the
prediction), ACC_L the LLM judge's verdict. Failed searches and missing verdicts are stated above the
table, never left for the reader to find in the JSON.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from eval.suites import SUITES, table

# Summary key -> column name; ACC_R is R1-Searcher's name for cover-EM.
COLUMNS = {"cem": "ACC_R", "acc_l": "ACC_L", "em": "EM", "f1": "F1"}


def _summaries(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.summary.json"))]


def settings_line(summaries: list[dict]) -> str:
    """Model, engine and episode settings, as one line (the figure's subtitle, the table's caption)."""
    s = summaries[0]
    st = s.get("settings", {})
    parts = [f"model {s.get('model', '?')}"]
    if s.get("engine"):
        parts.append(f"engine {s['engine']}")
    if st:
        parts.append(
            f"top-{st.get('top_k')} passages, at most {st.get('max_searches')} searches, "
            f"{st.get('segment_tokens')} tokens/segment, temperature {st.get('temperature')}"
        )
        if (st.get("max_queries_per_block") or 1) > 1:
            parts.append(f"up to {st['max_queries_per_block']} queries/search ({st.get('query_separator')!r})")
    if isinstance(s.get("search"), dict) and s["search"].get("provider"):
        parts.append(f"web search {s['search']['provider']}")
    return "; ".join(parts)


def warnings(summaries: list[dict]) -> list[str]:
    lines = []
    failed = sum(s.get("search_errors", 0) for s in summaries)
    if failed:
        questions = sum(s.get("questions_with_search_errors", 0) for s in summaries)
        accepted = all(s.get("search_errors_allowed") for s in summaries if s.get("search_errors"))
        lines.append(
            f"**{failed} searches failed** in {questions} question{'s' * (questions != 1)}: "
            + (
                "accepted with --allow-search-errors; those questions were answered without documents."
                if accepted
                else "these figures are not results; fix the search backend and run the same command again."
            )
        )
    halted = [s["dataset"] for s in summaries if s.get("halted_on_outage")]
    if halted:
        lines.append(
            f"**The run stopped in {', '.join(halted)}**: every search of a batch failed "
            f"({sum(s.get('not_run', 0) for s in summaries)} questions not run)."
        )
    missing = sum(s.get("judge_missing", 0) for s in summaries)
    if missing:
        lines.append(f"**{missing} records have no judge verdict**; ACC_L is left out until they do.")
    return lines


def markdown(summaries: list[dict]) -> str:
    cols = [m for m in COLUMNS if any(m in s for s in summaries)]
    head = "| dataset | n | " + " | ".join(COLUMNS[c] for c in cols) + " | searches/q | no answer | search errors |"
    rows = [head, "|---|---|" + "---|" * len(cols) + "---|---|---|"]
    for s in summaries:
        cells = [f"{100 * s[c]:.1f}" if c in s else "" for c in cols]
        rows.append(
            f"| {s['dataset']} | {s['n']} | "
            + " | ".join(cells)
            + f" | {s['mean_searches']:.2f} | {s['no_answer']} | {s.get('search_errors', 0)} |"
        )
    notes = warnings(summaries)
    judge = next((s["judge_model"] for s in summaries if s.get("judge_model")), None)
    caption = [settings_line(summaries) + ".", "ACC_R: cover-EM, as in R1-Searcher."]
    if judge:
        caption.append(f"ACC_L judged by {judge}.")
    return "\n\n".join([*notes, "\n".join(rows), " ".join(caption)]) + "\n"


def build_figure(summaries: list[dict], counts: list[Counter]) -> Any:
    """Accuracy per dataset and metric, and the distribution of searches per question."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = [m for m in COLUMNS if any(m in s for s in summaries)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5))
    width = 0.8 / max(1, len(cols))
    for j, metric in enumerate(cols):
        xs = [i + j * width for i in range(len(summaries))]
        bars = left.bar(xs, [100 * s.get(metric, 0) for s in summaries], width, label=COLUMNS[metric])
        left.bar_label(bars, fmt="%.1f", fontsize=7, rotation=90, padding=2)
    left.set_xticks([i + width * (len(cols) - 1) / 2 for i in range(len(summaries))])
    left.set_xticklabels([f"{s['dataset']}\nn={s['n']}" for s in summaries])
    left.set_ylabel("% of questions")
    left.set_ylim(0, 118)  # room for the vertical value labels above a 100% bar
    left.set_title("accuracy per dataset")
    # Legends sit outside the axes, where no bar can be.
    left.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    most = max((max(c) for c in counts if c), default=0)
    bar = 0.8 / max(1, len(summaries))
    for j, (s, c) in enumerate(zip(summaries, counts, strict=True)):
        xs = [x + j * bar for x in range(most + 1)]
        right.bar(xs, [c.get(x, 0) / s["n"] for x in range(most + 1)], bar, label=s["dataset"])
    right.set_xticks([x + bar * (len(summaries) - 1) / 2 for x in range(most + 1)])
    right.set_xticklabels([str(x) for x in range(most + 1)])
    right.set_xlabel("searches per question")
    right.set_ylabel("share of questions")
    right.set_ylim(0, 1.05)
    right.set_title("searches per question")
    right.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    notes = [w.replace("**", "") for w in warnings(summaries)]
    fig.suptitle("\n".join([settings_line(summaries), *notes]), fontsize=9, color="firebrick" if notes else "black")
    fig.tight_layout()
    return fig


def figure(out: Path, summaries: list[dict]) -> Path:
    import matplotlib.pyplot as plt

    counts = []
    for s in summaries:
        with (out / f"{s['dataset']}.jsonl").open() as fh:
            counts.append(Counter(json.loads(line)["num_searches"] for line in fh if line.strip()))
    fig = build_figure(summaries, counts)
    path = out / "results.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_reports(out: Path) -> None:
    summaries = _summaries(out)
    if not summaries:
        return
    text = markdown(summaries)
    for suite in SUITES:
        found = table(suite, summaries)
        if found:
            (out / f"{suite}.md").write_text(found, encoding="utf-8")
            text += f"\n## In {suite}'s table\n\n{found}"
    (out / "results.md").write_text(text, encoding="utf-8")
    figure(out, summaries)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="searchrl eval report",
        description="Rewrite results.md and results.png of an evaluation output folder from its *.summary.json "
        "files (e.g. after `searchrl eval judge` refreshed a summary).",
    )
    p.add_argument("out", type=Path, help="the evaluation output folder (--out of `searchrl eval local|online`)")
    args = p.parse_args(argv)
    if not _summaries(args.out):
        print(f"error: {args.out}: no *.summary.json here; is it an evaluation output folder?", file=sys.stderr)
        return 2
    write_reports(args.out)
    print(f"{args.out / 'results.md'}\n{args.out / 'results.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
