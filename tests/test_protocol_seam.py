"""A protocol is one seam: a copy of the tree gains a toy protocol as one module (Search-R1's loop spelled with other
tags) and one line in `PROTOCOLS`, and an episode through OpenRLHF's agent loop, its reward from a real reward server
and an evaluation through `eval.run_local` all speak it, with nothing else in the tree changed. A consumer that spelled
a tag or switched on a protocol's name would miss the toy's tags and fail here."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from searchrl.protocols.r1_searcher import parse_solution
from tests.conftest import ROOT

# What the copy needs to run a stage, the reward server and an evaluation (the tests' helpers included).
COPIED = ("searchrl", "eval", "reward_server", "search_backend", "stage1_format", "stage2_answer", "configs")
COPIED_FILES = ("tests/__init__.py", "tests/conftest.py", "examples/bamboogle_llama_sample.jsonl", "pyproject.toml")
TOY_TAGS = {"think": "reason", "search": "lookup", "information": "found", "answer": "reply"}
SAMPLE = "examples/bamboogle_llama_sample.jsonl"


def toy_module() -> str:
    """Search-R1's protocol module with each tag renamed (its prompt and invalid-action message too), named "toy",
    read by the project's reward formula alone and with no warm start of its own."""
    source = (ROOT / "searchrl/protocols/search_r1.py").read_text(encoding="utf-8")
    words = 'THINK, SEARCH, INFORMATION, ANSWER = "think", "search", "information", "answer"'
    assert words in source
    source = source.replace(
        words, "THINK, SEARCH, INFORMATION, ANSWER = " + ", ".join(f'"{t}"' for t in TOY_TAGS.values())
    )
    for old, new in TOY_TAGS.items():
        source = source.replace(f"<{old}>", f"<{new}>").replace(f"</{old}>", f"</{new}>")
    source = source.replace('NAME = "search-r1"', 'NAME = "toy"')
    source = re.sub(
        r"REWARD_FORMULAS: tuple\[str, \.\.\.\] = \([^)]*\)",
        'REWARD_FORMULAS: tuple[str, ...] = ("searchrl",)',
        source,
    )
    source = re.sub(r"WARM_START: str \| None = .*", "WARM_START: str | None = None", source)
    assert 'NAME = "toy"' in source and '("searchrl",)' in source and "WARM_START: str | None = None" in source
    return source


def copy_with_toy(dest: Path) -> Path:
    for folder in COPIED:
        shutil.copytree(ROOT / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__", "resolved"))
    for file in COPIED_FILES:
        (dest / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / file, dest / file)
    protocols = dest / "searchrl/protocols"
    (protocols / "toy.py").write_text(toy_module(), encoding="utf-8")
    registry = protocols / "__init__.py"
    text = registry.read_text(encoding="utf-8")
    imports = "from searchrl.protocols import r1_searcher, rag_r1, router_r1, search_r1, tool_call\n"
    entry = '    "tool-call": tool_call.DEFAULT,\n'
    assert imports in text and entry in text
    text = text.replace(imports, imports.replace("tool_call\n", "tool_call, toy\n"))
    registry.write_text(text.replace(entry, entry + '    "toy": toy,\n'), encoding="utf-8")
    return dest


EPISODE = """
import asyncio, json, sys
from transformers import AutoTokenizer
from reward_server.app import ServerSettings, create_app
from searchrl.rollout.agent import Runtime, load_agent_executor
from searchrl.rollout.engines import CompletionOutput, RequestOutput, SamplingParams
from searchrl.stage.config import load_stage
from tests.conftest import ROOT, serve

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
STAGE = ROOT / "configs/stages/stage2_answer.yaml"
TOY = ["protocol=toy", "reward.protocol=toy", "episode.max_turns=2"]
scripts = json.loads(sys.argv[3])

class Scripted:
    def __init__(self, turns):
        self.turns, self.calls = turns, 0
    async def generate(self, prompt_token_ids, params, multi_modal_data=None):
        text = self.turns[min(self.calls, len(self.turns) - 1)]
        self.calls += 1
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        for n in range(1, len(ids) + 1):
            if any(stop in tokenizer.decode(ids[:n]) for stop in params.stop or []):
                ids = ids[:n]
                break
        return RequestOutput([CompletionOutput(ids, tokenizer.decode(ids), "stop")])

async def main(reward_url, turns):
    overrides = [*TOY, "search.backend=local", f"search.index_dir={sys.argv[2]}", f"reward_server.urls={reward_url}"]
    stage, _ = load_stage(STAGE, overrides)
    executor = load_agent_executor(ROOT / stage.stage / "agent_func.py")
    runtime = Runtime.from_stage(stage)
    Runtime.install(runtime)
    try:
        params = SamplingParams(temperature=0.0, max_tokens=2048)
        prompt = "Question: Who wrote Hamlet?\\n"
        out = await executor.execute(prompt, "Shakespeare", params, 4096, tokenizer, Scripted(turns))
    finally:
        Runtime.install(None)
        await runtime.rewards.aclose()
        await runtime.environment.search.aclose()
    return {"reward": float(out["reward"]), "text": tokenizer.decode(out["observation_tokens"])}

stage, _ = load_stage(STAGE, TOY)
with serve(create_app(ServerSettings(spec=stage.reward))) as url:
    print(json.dumps([asyncio.run(main(url, turns)) for turns in scripts]))
"""


def run_in(tree: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return copy_with_toy(tmp_path_factory.mktemp("toy_tree"))


def episodes(tree: Path, index: Path, scripts: list[list[str]]) -> list[dict]:
    """One episode for each script of turns, in one process (its imports and index load are most of its time)."""
    tokenizer = ROOT / "examples/tiny_policy_search_r1"
    done = run_in(tree, "-c", EPISODE, str(tokenizer), str(index), json.dumps(scripts))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_toy_is_one_module_and_one_registry_line(tree):
    changed = subprocess.run(
        ["diff", "-r", "-q", "-x", "__pycache__", "-x", "resolved", str(ROOT / "searchrl"), str(tree / "searchrl")],
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert sorted(changed) == sorted(
        [f"Only in {tree / 'searchrl/protocols'}: toy.py", f"Files {ROOT}/searchrl/protocols/__init__.py and "
         f"{tree}/searchrl/protocols/__init__.py differ"]
    )  # fmt: skip
    assert "<search>" not in toy_module() and "<lookup>" in toy_module()


def test_an_episode_and_its_reward_speak_the_toy(tree, mini_index):
    good, foreign = episodes(
        tree,
        mini_index,
        [
            ["<reason> look it up </reason>\n<lookup> Hamlet author </lookup>",
             "<reason> found </reason>\n<reply> Shakespeare </reply>"],
            # The same episode in Search-R1's spelling: to the toy, neither a search nor an answer.
            ["<think> look it up </think>\n<search> Hamlet author </search>",
             "<think> found </think>\n<answer> Shakespeare </answer>"],
        ],
    )  # fmt: skip
    # The environment answered the toy's search in the toy's documents block, and the reward read its answer.
    assert "<found>" in good["text"] and "</found>" in good["text"] and "<information>" not in good["text"]
    assert "<found>" not in foreign["text"]
    assert good["reward"] > foreign["reward"], (good["reward"], foreign["reward"])


CONVERT = """
import json, sys
from searchrl.protocols import get_protocol
toy = get_protocol("toy")
with open(sys.argv[1]) as src, open(sys.argv[2], "w") as out:
    for line in list(src)[:3]:
        row = json.loads(line)
        out.write(json.dumps({**row, "gen_text_store": toy.from_r1_searcher(row["gen_text_store"])}) + "\\n")
"""


def test_an_evaluation_speaks_the_toy(tree, mini_index, tmp_path):
    # Released R1-Searcher trajectories as a toy policy writes them (the toy's own translation), replayed live.
    recordings = tmp_path / "toy_recordings.jsonl"
    converted = run_in(tree, "-c", CONVERT, str(ROOT / SAMPLE), str(recordings))
    assert converted.returncode == 0, converted.stderr[-3000:]
    args = ["-m", "eval.run_local", "--protocol", "toy", "--dataset", SAMPLE, "--engine", "replay", "--recordings"]
    out = tmp_path / "out"
    done = run_in(tree, *args, str(recordings), "--index", str(mini_index), "--limit", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    recorded = [json.loads(line) for line in (ROOT / SAMPLE).open()][:3]
    results = [json.loads(line) for line in (out / "bamboogle_llama_sample.jsonl").open()]
    assert len(results) == 3
    for result, record in zip(results, recorded, strict=True):
        queries = parse_solution(record["gen_text_store"]).queries
        assert "<search>" not in result["gen_text_store"] and "<|begin_of_query|>" not in result["gen_text_store"]
        # The toy allows 4 searches (Search-R1's evaluation): every query of these recordings is searched, in the
        # toy's tags, with the toy's documents block after it, and the toy's answer is the one extracted.
        assert 1 <= len(queries) <= 4 and result["searches"] == queries
        assert result["gen_text_store"].count("<found>") == len(queries)
        assert result["pred_ans"] == record["pred_ans"]
