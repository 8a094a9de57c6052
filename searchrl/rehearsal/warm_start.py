"""The tiny policy's warm start, built once per set of inputs: a random-init policy and its tokenizer
(searchrl/tiny_policy/model.py), the trajectory mixture (searchrl/tiny_policy/mixture.py) over the rehearsal
index, then OpenRLHF's own SFT stage on it, rehearsed on CPU (searchrl/rehearsal/sft.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from search_backend.base import r1_text
from search_backend.local_faiss import LocalFaissBackend
from searchrl.config import load
from searchrl.paths import CONFIGS, EXAMPLES, ROOT, RUNS
from searchrl.rehearsal.sft import run_sft
from searchrl.stage.config import ModelConfig
from searchrl.tiny_policy.mixture import MIXTURE, build, fictional_questions, real_questions
from searchrl.tiny_policy.model import build_policy

POLICY_DIR = RUNS / "tiny_policy"
# What the warm start is made from: a change to any of these builds a new one (the cache key).
INPUTS = (
    Path(__file__),
    ROOT / "searchrl/tiny_policy/model.py",
    ROOT / "searchrl/tiny_policy/mixture.py",
    ROOT / "searchrl/rehearsal/sft.py",
    ROOT / "searchrl/job/sft.py",
    CONFIGS / "stages/sft.yaml",
    EXAMPLES / "stage_1.jsonl",
    EXAMPLES / "mini_corpus.jsonl",
    EXAMPLES / "fictional/corpus.jsonl",
    EXAMPLES / "fictional/train.jsonl",
)


def cache_key(seed: int) -> str:
    h = hashlib.sha256(f"seed={seed}".encode())
    for path in INPUTS:
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def ensure(
    index: Path, seed: int = 0, template: Path | None = None, log: Callable[[str], None] = print, force: bool = False
) -> Path:
    """The warm-started tiny policy (a Hugging Face folder), built once per set of inputs under
    runs/tiny_policy/<key>/: a random-init policy and its tokenizer (`base/`), the mixture (`sft.jsonl`),
    then the SFT stage on it, rehearsed on CPU (`warm_start/`)."""
    home = POLICY_DIR / cache_key(seed)
    final = home / "warm_start"
    if (final / "config.json").is_file() and not force:
        return final
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    model = load(ModelConfig, template or CONFIGS / "models/qwen2.5-7b-base.yaml")
    if model.template is None:
        raise ValueError(f"{model.name}: the tiny policy's warm start needs a base model's plain-text template")
    backend = LocalFaissBackend(index)

    def retrieve(queries: list[str]) -> list[list[str]]:
        return [[r1_text(p) for p in hits] for hits in asyncio.run(backend.search(queries, 3))]

    render = lambda q: model.template.replace("{question}", q)  # noqa: E731
    rows = build(real_questions(), render, retrieve, "</s>", seed=seed, copies=1)
    rows += build(fictional_questions(), render, retrieve, "</s>", seed=seed + 1, copies=3, copy_rate=0.5)
    data = home / "sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    texts = [model.template] * 20 + ["".join(m["content"] for m in r["messages"]) for r in rows]
    for name in ("mini_corpus.jsonl", "fictional/corpus.jsonl"):
        texts += [json.loads(line)["text"] for line in (EXAMPLES / name).open(encoding="utf-8")]
    base = build_policy(home / "base", texts, seed)
    log(f"[warm start] {len(rows)} trajectories ({data}); SFT stage on CPU from {base}")
    result = run_sft(data, base, home / "sft", seed=seed)
    (home / "sft" / "final").rename(final)
    kinds = {k: sum(r["kind"] == k for r in rows) for k in MIXTURE}
    record = {**result, "hf_checkpoint": str(final), "data": str(data), "trajectories": len(rows), "kinds": kinds}
    (home / "warm_start.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    return final
