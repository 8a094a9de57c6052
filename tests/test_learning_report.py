"""benchmarks.learning's summary: the stage-2 targets are checked on sampled and on greedy EM, each on its own;
a stage's run and its control train at once."""

import threading

import pytest

from benchmarks.learning import side_by_side, summary


def evaluation(em: float, greedy: float | None, names: float = 0.9) -> dict:
    copy = {
        "names_rate": names,
        "doc_city": 0.7,
        "swapped_shown_city": 0.6,
        "swapped_gold": 0.05,
        "top_city_share": 0.1,
    }
    out = {"score": em, "reward": em, "em": em, "searches_per_episode": 1.0, "response_length": 100.0, "copy": copy}
    return out | ({"greedy": {"em": greedy, "score": greedy}} if greedy is not None else {})


def report(*seeds: tuple[float, float | None, float, float | None]) -> dict:
    rows = []
    for seed, (start, start_greedy, final, final_greedy) in enumerate(seeds):
        s1 = {n: evaluation(0.9, None) for n in ("warm_start", "final")}
        s2 = {"start": evaluation(start, start_greedy), "final": evaluation(final, final_greedy)}
        s2["control"] = evaluation(start, start_greedy)
        log = [{"step": 1, "em": 0.2}, {"step": 2, "em": 0.55}]
        rows.append({"seed": seed, "stage1": {"eval": s1}, "stage2": {"eval": s2, "train": {"steps_log": log}}})
    return {"seeds": rows}


def test_targets_hold_on_greedy_and_fail_on_sampled_each_on_its_own():
    t = summary(report((0.15, 0.25, 0.55, 0.7), (0.14, 0.2, 0.5, 0.65)))["stage2"]
    assert t["targets"]["em_at_least_0.6_greedy"] and t["targets"]["em_gain_at_least_0.3_greedy"]
    assert not t["targets"]["em_at_least_0.6_sampled"] and t["targets"]["em_gain_at_least_0.3_sampled"]
    assert round(t["worst_seed_em_gain_greedy"], 3) == 0.45 and round(t["worst_seed_em_gain_sampled"], 3) == 0.36
    assert t["mean"]["final"]["greedy_em"] == 0.675 and t["steps_to_em_0.5"] == {"train": {0: 2, 1: 2}}


def test_one_weak_seed_fails_the_target_and_a_report_without_greedy_has_no_greedy_targets():
    t = summary(report((0.15, 0.25, 0.55, 0.7), (0.14, 0.2, 0.5, 0.45)))["stage2"]["targets"]
    assert not t["em_at_least_0.6_greedy"] and not t["em_gain_at_least_0.3_greedy"]
    old = summary(report((0.15, None, 0.55, None)))["stage2"]
    assert "em_at_least_0.6_greedy" not in old["targets"] and old["mean"]["final"]["greedy_em"] is None


def test_side_by_side_runs_the_jobs_at_once_and_keeps_their_order():
    """Each job waits for the other at a barrier: run one after the other, the first would time out."""
    met = threading.Barrier(2, timeout=10)

    def job(name: str) -> dict:
        met.wait()
        return {"run": name}

    assert side_by_side(lambda: job("train"), lambda: job("control")) == [{"run": "train"}, {"run": "control"}]


def test_side_by_side_raises_a_failed_job():
    def fails() -> dict:
        raise RuntimeError("the training job failed")

    with pytest.raises(RuntimeError, match="training job failed"):
        side_by_side(lambda: {"run": "train"}, fails)


def test_a_run_records_its_commit_and_its_warm_start(tmp_path, monkeypatch):
    """learning.json names the checkout and the warm start it measured; the content hash follows the weights."""
    import json
    import shutil

    from benchmarks import learning
    from searchrl.paths import EXAMPLES, ROOT

    head = learning.commit()
    assert len(head["head"]) == 40 and isinstance(head["dirty"], bool)
    shipped = learning.warm_start_record("r1-searcher")
    built = json.loads((EXAMPLES / "tiny_policy/build.json").read_text())
    assert shipped["folder"] == "examples/tiny_policy" and shipped["inputs_hash"] == built["inputs_hash"]
    copy = ROOT / "runs" / f"warm-start-record-{tmp_path.name}"
    shutil.copytree(EXAMPLES / "tiny_policy", copy)
    try:
        speaker = learning.SPEAKERS["r1-searcher"]
        monkeypatch.setitem(learning.SPEAKERS, "r1-searcher", type(speaker)(**{**vars(speaker), "shipped": copy}))
        assert learning.warm_start_record("r1-searcher")["content_sha256"] == shipped["content_sha256"]
        weights = copy / "model.safetensors"
        data = weights.read_bytes()
        weights.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        assert learning.warm_start_record("r1-searcher")["content_sha256"] != shipped["content_sha256"]
    finally:
        shutil.rmtree(copy)


def test_a_merged_report_keeps_each_runs_commit_and_warm_start(tmp_path):
    import json

    from benchmarks import learning

    dirs = []
    for n, (head, seed) in enumerate([("a" * 40, 0), ("b" * 40, 2)]):
        run = report((0.15, None, 0.55, None)) | {
            "date": "2026-11-28",
            "settings": {"steps1": 12, "lr": 3e-4, "eval_samples": 2},
            "commit": {"head": head, "dirty": False},
            "warm_start": {"content_sha256": f"w{n}"},
            "fictional_world": {"seed": 2026, "split_seed": 0},
        }
        run["seeds"][0]["seed"] = seed
        dirs.append(tmp_path / f"run{n}")
        dirs[-1].mkdir()
        (dirs[-1] / "learning.json").write_text(json.dumps(run))
    learning.merge(dirs, tmp_path / "merged")
    merged = json.loads((tmp_path / "merged/learning.json").read_text())
    assert [s["seed"] for s in merged["seeds"]] == [0, 2]
    assert [
        (m["seeds"], m["commit"]["head"][0], m["warm_start"]["content_sha256"]) for m in merged["merged_from"]
    ] == [
        ([0], "a", "w0"),
        ([2], "b", "w1"),
    ]
    # A third run joined to that merged report: each seed still names the commit it was measured at.
    run = json.loads((dirs[0] / "learning.json").read_text()) | {"commit": {"head": "c" * 40, "dirty": False}}
    run["seeds"][0]["seed"] = 1
    (dirs[0] / "learning.json").write_text(json.dumps(run))
    learning.merge([tmp_path / "merged", dirs[0]], tmp_path / "again")
    again = json.loads((tmp_path / "again/learning.json").read_text())
    assert [s["seed"] for s in again["seeds"]] == [0, 1, 2]
    assert [(m["seeds"], m["commit"]["head"][0]) for m in again["merged_from"]] == [([0], "a"), ([2], "b"), ([1], "c")]


def test_the_splits_are_disjoint_real_and_fictional_questions_and_nothing_trains_on_dev():
    """Stage 1's dev questions are real ones nothing trains on (not among the 250 training questions nor its 100
    held-out ones); stage 2's splits are the fictional world's people; an unknown split is refused."""
    from benchmarks.learning import questions
    from searchrl.metrics import normalize_answer
    from searchrl.tiny_policy.mixture import real_questions

    dev, held = questions("stage1", "dev"), questions("stage1", "heldout")
    trained = {normalize_answer(q.query) for q in real_questions()}
    names = lambda rows: {normalize_answer(r["question"]) for r in rows}  # noqa: E731
    assert len(dev) == len(held) == 100 and not names(dev) & names(held) and not names(dev) & trained
    assert not names(held) & trained
    assert not names(questions("stage2", "dev")) & names(questions("stage2", "heldout"))
    with pytest.raises(ValueError, match="split 'train'"):
        questions("stage2", "train")


def test_ci_check_passes_a_run_that_learned_and_fails_the_same_seed_at_lr_0():
    """The check CI runs: a stage 2 that stage 1 left at EM 0.82 passes by reaching 0.8 only when it still gains 0.05;
    its lr = 0 control (same weights, same seeded evaluation: gain 0) fails, as does a stage 1 that did not rise."""
    from benchmarks.learning import ci_check

    r = report((0.82, None, 0.9, None))
    r["seeds"][0]["stage1"]["eval"] = {"warm_start": evaluation(0.2, None), "final": evaluation(0.7, None)}
    r["seeds"][0]["stage1"]["eval"]["control"] = evaluation(0.2, None)
    r["seeds"][0]["stage2"]["eval"]["control"] = evaluation(0.82, None)
    assert ci_check(r) == []
    failed = ci_check(r, "control")
    assert len(failed) == 2 and failed[0].startswith("stage 1") and failed[1].startswith("stage 2: EM 0.820 -> 0.820")
    r["seeds"][0]["stage2"]["eval"]["final"] = evaluation(0.84, None)
    assert ci_check(r) == ["stage 2: EM 0.820 -> 0.840: neither a gain of 0.2 nor 0.8 reached with a gain of 0.05"]
    r["seeds"][0]["stage2"]["eval"]["final"] = evaluation(0.9, None) | {"copy": {"swapped_shown_city": 0.3}}
    assert ci_check(r) == ["stage 2: with another person's documents the answer follows them in 0.300"]
