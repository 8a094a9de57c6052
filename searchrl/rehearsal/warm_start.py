"""The tiny policy's warm start: shipped in `examples/tiny_policy/` (2.5 MB), built by
`python -m searchrl.rehearsal.warm_start build` from the copy curriculum (searchrl/tiny_policy/build.py).

`build.json` beside the weights records the recipe's seed, what the probe measured and a hash of every input
(the code and data in INPUTS, R1-Searcher's tags and the protocol functions the tiny policy calls). When the
inputs change and nobody rebuilt, `ensure` builds a fresh warm start under runs/tiny_policy/<hash>/ (about 15
minutes on 2 cores) and says so, and a test fails until the shipped one is rebuilt: the policy every rehearsal
starts from is always the one its inputs make.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from searchrl.config import load
from searchrl.paths import CONFIGS, EXAMPLES, ROOT, RUNS
from searchrl.protocols import r1_searcher
from searchrl.rehearsal.inputs import passage_retriever, rehearsal_index
from searchrl.stage.config import ModelConfig
from searchrl.tiny_policy.build import build
from searchrl.tiny_policy.curriculum import Recipe

SHIPPED = EXAMPLES / "tiny_policy"
POLICY_DIR = RUNS / "tiny_policy"
TEMPLATE = CONFIGS / "models/qwen2.5-7b-base.yaml"
# What the warm start is made from: a change to any of these makes the shipped one stale.
INPUTS = (
    *sorted((ROOT / "searchrl/tiny_policy").glob("*.py")),
    ROOT / "searchrl/qa_data/fictional.py",
    TEMPLATE,
    EXAMPLES / "stage_1.jsonl",
    EXAMPLES / "mini_corpus.jsonl",
    EXAMPLES / "fictional/corpus.jsonl",
    EXAMPLES / "fictional/train.jsonl",
    EXAMPLES / "fictional/heldout.jsonl",
)


# Of R1-Searcher's protocol module, what the tiny policy is trained on and probed with: its tags and the functions
# its curriculum and probe call. The module's other parts (the interface other runs ask of a protocol) can change
# without making the warm start stale.
PROTOCOL_TAGS = ("THINK_OPEN", "THINK_CLOSE", "BEGIN_QUERY", "END_QUERY", "BEGIN_DOCS", "END_DOCS", "ANSWER_OPEN",
                 "ANSWER_CLOSE")  # fmt: skip
PROTOCOL_CALLS = ("format_documents", "extract_answer", "_last_answer", "last_query", "clean_query")


def protocol_sources(path: Path = ROOT / "searchrl/protocols/r1_searcher.py") -> list[str]:
    """The source of each function in PROTOCOL_CALLS, read from the file as it is now (`inspect.getsource` reads
    the file at the line a loaded module recorded, which is wrong once the file has been edited)."""
    text = path.read_text(encoding="utf-8")
    found = {
        n.name: ast.get_source_segment(text, n) or "" for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)
    }
    missing = [name for name in PROTOCOL_CALLS if name not in found]
    if missing:
        raise ValueError(f"{path}: no function {', '.join(missing)}: update warm_start.PROTOCOL_CALLS")
    return [found[name] for name in PROTOCOL_CALLS]


def inputs_hash(seed: int = Recipe().seed) -> str:
    h = hashlib.sha256(f"seed={seed}".encode())
    for path in INPUTS:
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    h.update(json.dumps({name: getattr(r1_searcher, name) for name in PROTOCOL_TAGS}).encode())
    for source in protocol_sources():
        h.update(source.encode())
    return h.hexdigest()[:16]


def shipped_record() -> dict:
    path = SHIPPED / "build.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def base_template() -> str:
    """The base model's plain-text prompt template, which the tiny policy is trained and sampled with."""
    model = load(ModelConfig, TEMPLATE)
    if model.template is None:
        raise ValueError(f"{TEMPLATE}: the tiny policy's warm start needs a base model's plain-text template")
    return model.template


def build_folder(out: Path, index: Path, seed: int, log: Callable[[str], None] = print) -> dict:
    """Builds the warm start into `out` (replaced) from the rehearsal index; writes and returns build.json."""
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.monotonic()
    record = build(tmp, base_template(), passage_retriever(index), Recipe(seed=seed), log)
    record = {"inputs_hash": inputs_hash(seed), "seconds": round(time.monotonic() - t0, 1), **record}
    (tmp / "build.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return record


def ensure(index: Path, log: Callable[[str], None] = print) -> Path:
    """The warm start as a Hugging Face folder: the shipped one when its inputs are today's, else one built once
    per set of inputs under runs/tiny_policy/<hash>/."""
    record = shipped_record()
    seed = record.get("recipe", {}).get("seed", Recipe().seed)
    key = inputs_hash(seed)
    if record.get("inputs_hash") == key:
        return SHIPPED
    home = POLICY_DIR / key
    if (home / "build.json").is_file():
        return home
    log(f"[warm start] the shipped one was built from inputs that have changed since: building {home} (about 15 "
        "min on 2 cores); to ship it: python -m searchrl.rehearsal.warm_start build")  # fmt: skip
    build_folder(home, index, seed, log)
    return home


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m searchrl.rehearsal.warm_start",
        description="The tiny policy's warm start. `build` trains it on the copy curriculum (about 15 min on 2 "
        "cores) and writes the folder the rehearsals start from; `check` says whether the shipped one is "
        "built from today's inputs.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the warm start (default: over the shipped one)")
    b.add_argument("--out", type=Path, default=SHIPPED, help=f"folder to write (default {SHIPPED})")
    b.add_argument("--seed", type=int, default=Recipe().seed, help="the recipe's seed (default %(default)s)")
    sub.add_parser("check", help="exit 1 when the shipped warm start is stale")
    args = p.parse_args(argv)
    if args.command == "check":
        record, key = shipped_record(), inputs_hash()
        fresh = record.get("inputs_hash") == key
        print(json.dumps({"shipped": str(SHIPPED), "built_from": record.get("inputs_hash"), "inputs": key,
                          "fresh": fresh}))  # fmt: skip
        return 0 if fresh else 1
    record = build_folder(args.out, rehearsal_index(), args.seed, lambda m: print(m, flush=True))
    print(json.dumps({k: v for k, v in record.items() if k != "phases"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
