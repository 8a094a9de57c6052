"""The tiny policy's warm starts, one per tag protocol it speaks: R1-Searcher's shipped in `examples/tiny_policy/`
(2.5 MB), Search-R1's in `examples/tiny_policy_search_r1/`, each built by `python -m searchrl.rehearsal.warm_start
build [--protocol P]` from the copy curriculum (searchrl/tiny_policy/build.py) written in its protocol's tags
(searchrl/tiny_policy/writing.py). A stage in another protocol (RAG-R1's, Router-R1's) starts from R1-Searcher's.

`build.json` beside the weights records the recipe's seed, what the probe measured and a hash of every input
(the code and data in INPUTS, the protocol's tags and the protocol functions the tiny policy calls). When the
inputs change and nobody rebuilt, `ensure` builds a fresh warm start under runs/tiny_policy/<hash>/ (about 20
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
from dataclasses import dataclass
from pathlib import Path

from searchrl.config import load
from searchrl.paths import CONFIGS, EXAMPLES, ROOT, RUNS
from searchrl.protocols import r1_searcher, search_r1
from searchrl.rehearsal.inputs import passage_retriever, rehearsal_index
from searchrl.stage.config import ModelConfig
from searchrl.stage.templates import protocol_model
from searchrl.tiny_policy.build import build
from searchrl.tiny_policy.curriculum import Recipe
from searchrl.tiny_policy.writing import WRITINGS

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


@dataclass(frozen=True)
class Speaker:
    """A protocol's warm start: where it is shipped, and what of the protocol's module the tiny policy is trained
    on and probed with (its tags and the functions its writing calls). The module's other parts (the interface
    other runs ask of a protocol) can change without making the warm start stale."""

    protocol: str
    shipped: Path
    module: Path
    tags: dict[str, str]
    calls: tuple[str, ...]


SPEAKERS = {
    "r1-searcher": Speaker(
        "r1-searcher",
        SHIPPED,
        ROOT / "searchrl/protocols/r1_searcher.py",
        {name: getattr(r1_searcher, name) for name in ("THINK_OPEN", "THINK_CLOSE", "BEGIN_QUERY", "END_QUERY",
                                                         "BEGIN_DOCS", "END_DOCS", "ANSWER_OPEN", "ANSWER_CLOSE")},
        ("format_documents", "extract_answer", "_last_answer", "last_query", "clean_query"),
    ),
    "search-r1": Speaker(
        "search-r1",
        EXAMPLES / "tiny_policy_search_r1",
        ROOT / "searchrl/protocols/search_r1.py",
        {"PROMPT": search_r1.PROMPT, **{name: getattr(search_r1, name) for name in (
            "THINK_OPEN", "THINK_CLOSE", "SEARCH_OPEN", "SEARCH_CLOSE", "DOCUMENTS_OPEN", "DOCUMENTS_CLOSE",
            "ANSWER_OPEN", "ANSWER_CLOSE")}},
        ("titled", "passage_entry", "documents_block", "_after", "search_query", "action", "policy_answer"),
    ),
}  # fmt: skip
# The protocols whose stages start from R1-Searcher's warm start: their tags are not the tiny policy's.
DEFAULT_SPEAKER = "r1-searcher"


def speaker(protocol: str) -> Speaker:
    return SPEAKERS.get(protocol, SPEAKERS[DEFAULT_SPEAKER])


def protocol_sources(path: Path, calls: tuple[str, ...]) -> list[str]:
    """The source of each function in `calls`, read from the file as it is now (`inspect.getsource` reads
    the file at the line a loaded module recorded, which is wrong once the file has been edited)."""
    text = path.read_text(encoding="utf-8")
    found = {
        n.name: ast.get_source_segment(text, n) or "" for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)
    }
    missing = [name for name in calls if name not in found]
    if missing:
        raise ValueError(f"{path}: no function {', '.join(missing)}: update warm_start.SPEAKERS")
    return [found[name] for name in calls]


def inputs_hash(seed: int = Recipe().seed, protocol: str = DEFAULT_SPEAKER) -> str:
    who = speaker(protocol)
    h = hashlib.sha256(f"seed={seed}".encode())
    if who.protocol != DEFAULT_SPEAKER:  # R1-Searcher's hash keeps its former shape
        h.update(f"protocol={who.protocol}".encode())
    for path in INPUTS:
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    h.update(json.dumps(who.tags).encode())
    for source in protocol_sources(who.module, who.calls):
        h.update(source.encode())
    return h.hexdigest()[:16]


def shipped_record(protocol: str = DEFAULT_SPEAKER) -> dict:
    path = speaker(protocol).shipped / "build.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def base_template(protocol: str = DEFAULT_SPEAKER) -> str:
    """The base model's plain-text prompt in the protocol (R1-Searcher's: the model config's template; Search-R1's:
    its instruction, as a base model receives it), which the tiny policy is trained and sampled with."""
    model = protocol_model(load(ModelConfig, TEMPLATE), speaker(protocol).protocol)
    if model.template is None:
        raise ValueError(f"{TEMPLATE}: the tiny policy's warm start needs a base model's plain-text template")
    return model.template


def build_folder(
    out: Path, index: Path, seed: int, log: Callable[[str], None] = print, protocol: str = DEFAULT_SPEAKER
) -> dict:
    """Builds the warm start into `out` (replaced) from the rehearsal index; writes and returns build.json."""
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.monotonic()
    template, writing = base_template(protocol), WRITINGS[speaker(protocol).protocol]
    record = build(tmp, template, passage_retriever(index), Recipe(seed=seed), log, writing)
    key = inputs_hash(seed, protocol)
    record = {"inputs_hash": key, "protocol": writing.PROTOCOL, "seconds": round(time.monotonic() - t0, 1), **record}
    (tmp / "build.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return record


def ensure(index: Path, log: Callable[[str], None] = print, protocol: str = DEFAULT_SPEAKER) -> Path:
    """The warm start in the protocol as a Hugging Face folder: the shipped one when its inputs are today's, else
    one built once per set of inputs under runs/tiny_policy/<hash>/."""
    who = speaker(protocol)
    record = shipped_record(who.protocol)
    seed = record.get("recipe", {}).get("seed", Recipe().seed)
    key = inputs_hash(seed, who.protocol)
    if record.get("inputs_hash") == key:
        return who.shipped
    home = POLICY_DIR / key
    if (home / "build.json").is_file():
        return home
    flag = "" if who.protocol == DEFAULT_SPEAKER else f" --protocol {who.protocol}"
    log(
        f"[warm start] the shipped {who.protocol} one was built from inputs that have changed since: building "
        f"{home} (about 20 min on 2 cores); to ship it: python -m searchrl.rehearsal.warm_start build{flag}"
    )
    build_folder(home, index, seed, log, who.protocol)
    return home


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m searchrl.rehearsal.warm_start",
        description="The tiny policy's warm starts. `build` trains one on the copy curriculum (about 20 min on 2 "
        "cores) and writes the folder the rehearsals start from; `check` says whether the shipped one is "
        "built from today's inputs.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build a warm start (default: over the shipped one)")
    b.add_argument("--out", type=Path, help="folder to write (default: the protocol's shipped folder)")
    b.add_argument("--seed", type=int, default=Recipe().seed, help="the recipe's seed (default %(default)s)")
    b.add_argument(
        "--protocol", choices=sorted(SPEAKERS), default=DEFAULT_SPEAKER, help="its tags (default %(default)s)"
    )
    c = sub.add_parser("check", help="exit 1 when a shipped warm start is stale")
    c.add_argument("--protocol", choices=sorted(SPEAKERS), help="the one to check (default: every one)")
    args = p.parse_args(argv)
    if args.command == "check":
        stale = 0
        for name in [args.protocol] if args.protocol else sorted(SPEAKERS):
            record = shipped_record(name)
            key = inputs_hash(record.get("recipe", {}).get("seed", Recipe().seed), name)
            fresh = record.get("inputs_hash") == key
            stale += not fresh
            print(json.dumps({"protocol": name, "shipped": str(speaker(name).shipped),
                              "built_from": record.get("inputs_hash"), "inputs": key, "fresh": fresh}))  # fmt: skip
        return 1 if stale else 0
    out = args.out or speaker(args.protocol).shipped
    record = build_folder(out, rehearsal_index(), args.seed, lambda m: print(m, flush=True), args.protocol)
    print(json.dumps({k: v for k, v in record.items() if k != "phases"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
