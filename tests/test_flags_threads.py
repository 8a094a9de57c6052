"""OpenRLHF's flags checked from several threads at once (benchmarks.learning plans a stage and its lr = 0 control side
by side): every parse and compile of OpenRLHF's source holds one lock, since CPython before 3.11.8 shares the AST
validator's recursion depth between threads (gh-106905) and one such plan failed with a SystemError."""

from __future__ import annotations

import ast
import threading
from concurrent.futures import ThreadPoolExecutor

from searchrl.job.plan import plan_stage
from searchrl.stage import openrlhf_flags


def test_every_parse_and_compile_of_openrlhfs_source_holds_the_lock(monkeypatch):
    args = plan_stage("stage1", None, [])["train_args"]
    calls = {"parse": 0, "compile": 0, "unlocked": 0}
    real_parse, real_compile = ast.parse, compile

    def held() -> bool:
        return openrlhf_flags.AST_LOCK._is_owned()  # type: ignore[attr-defined]

    def parse(*a, **k):
        calls["parse"] += 1
        calls["unlocked"] += not held()
        return real_parse(*a, **k)

    def compile_(*a, **k):
        calls["compile"] += 1
        calls["unlocked"] += not held()
        return real_compile(*a, **k)

    monkeypatch.setattr(openrlhf_flags.ast, "parse", parse)
    monkeypatch.setattr(openrlhf_flags, "compile", compile_, raising=False)
    openrlhf_flags._build_parser.cache_clear()
    openrlhf_flags.validated_args(args)
    assert calls["parse"] >= 2 and calls["compile"] >= 2, calls
    assert calls["unlocked"] == 0, calls


def test_plans_checked_from_eight_threads_agree():
    args = plan_stage("stage1", None, [])["train_args"]
    openrlhf_flags._build_parser.cache_clear()
    start = threading.Barrier(8)

    def check(_: int) -> int:
        start.wait()
        return sum(int(openrlhf_flags.validated_args(args).rollout.batch_size) for _ in range(5))

    with ThreadPoolExecutor(8) as pool:
        totals = list(pool.map(check, range(8)))
    assert len(set(totals)) == 1 and totals[0] > 0
