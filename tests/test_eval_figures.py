"""Pictures people read: the results figure names model, n and settings with legends clear of the bars;
the health figure draws its thresholds and labels its axes. And no command prints faiss's loader noise."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

from eval.report import build_figure, markdown
from searchrl.health import Thresholds
from searchrl.health import build_figure as health_figure
from tests.conftest import ROOT

SETTINGS = {
    "top_k": 5,
    "max_searches": 16,
    "segment_tokens": 512,
    "temperature": 0.0,
    "max_queries_per_block": 1,
    "query_separator": "||",
}


def summaries() -> list[dict]:
    # High scores on the last dataset: bars reach the top right, where an in-axes legend would sit.
    return [
        {"dataset": name, "n": n, "em": v, "cem": v, "f1": v, "acc_l": v, "mean_searches": 1.5, "no_answer": 0}
        | {"model": "stage2_answer-final", "engine": "vllm", "settings": SETTINGS, "search_errors": 0}
        for name, n, v in (("hotpotqa", 500, 0.55), ("2wiki", 500, 0.62), ("musique", 500, 0.3), ("bamboogle", 125, 1))
    ]


def overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_results_figure_names_model_n_settings_and_legends_clear_bars():
    rows = summaries()
    fig = build_figure(rows, [Counter({0: 10, 1: 300, 2: 190})] * 3 + [Counter({1: 125})])
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    title = fig._suptitle.get_text()
    assert "stage2_answer-final" in title and "top-5" in title and "16 searches" in title and "temperature" in title
    left, right = fig.axes[:2]
    assert [t.get_text() for t in left.get_xticklabels()][-1] == "bamboogle\nn=125"
    for ax in (left, right):
        legend = ax.get_legend().get_window_extent(renderer)
        for patch in ax.patches:
            assert not overlaps(legend, patch.get_window_extent(renderer)), ax.get_title()
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["ACC_R", "ACC_L", "EM", "F1"]
    table = markdown(rows)
    assert "| dataset | n | ACC_R | ACC_L | EM | F1 |" in table and "stage2_answer-final" in table


def test_health_figure_draws_thresholds_and_labels_axes():
    steps = range(40)
    curves = {
        "format_ok": [(s, 0.9 if s < 30 else 0.3) for s in steps],
        "searched": [(s, 0.8 if s < 30 else 0.0) for s in steps],
        "num_searches": [(s, 1.0) for s in steps],
    }
    t = Thresholds()
    fig = health_figure(curves, t)
    axes = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    assert all(ax.get_xlabel() == "step" and ax.get_ylabel() for ax in axes.values())
    levels = {round(line.get_ydata()[0], 3) for line in axes["searched"].lines if len(set(line.get_ydata())) == 1}
    assert {t.search_floor, t.search_learned} <= levels
    labels = [line.get_label() for line in axes["format_ok"].lines]
    assert any(f"best - {t.format_drop}" in label for label in labels)


def test_faiss_loader_noise_is_silenced():
    # Any command that configures logging before faiss loads printed the swigfaiss_avx2 INFO line.
    code = "import logging; logging.basicConfig(level=logging.INFO); import searchrl.search.index.faiss_index"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and "faiss.loader" not in out.stderr, out.stderr
