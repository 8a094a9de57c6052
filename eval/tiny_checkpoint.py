"""`searchrl eval tiny-checkpoint`: a tiny random checkpoint folder (save_pretrained) for CPU runs of the evaluation.

The command lives here rather than in searchrl/tiny_policy/model.py (whose own `python -m` entry stays as it is):
every byte of that package is an input of the shipped warm start's hash, so a change of wording there would
rebuild the warm start.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from searchrl.paths import EXAMPLES
from searchrl.tiny_policy.model import save_checkpoint
from searchrl.tiny_policy.qwen3_stand_in import save_qwen3_style_checkpoint

# Text the tokenizer is trained on: R1-Searcher's recorded generations and the bundled corpus.
SOURCES = (("bamboogle_llama_sample.jsonl", "gen_text_store"), ("mini_corpus.jsonl", "text"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="searchrl eval tiny-checkpoint",
        description="Write a tiny random checkpoint folder for CPU runs of the evaluation "
        "(`searchrl eval local --model FOLDER --template base --engine hf`). Its answers are noise.",
    )
    p.add_argument("--out", type=Path, default=Path("runs/tiny-checkpoint"), help="checkpoint folder to write")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    p.add_argument(
        "--arch",
        choices=("tiny", "qwen3"),
        default="tiny",
        help="tiny: the tiny policy's own architecture and plain tokenizer; qwen3: Qwen3ForCausalLM with a tokenizer "
        "and chat template of Qwen3's shape (thinking mode, tool calls), for the configs/models/qwen3-*.yaml configs",
    )
    args = p.parse_args(argv)
    texts = [
        json.loads(line).get(key, "") for name, key in SOURCES for line in (EXAMPLES / name).open(encoding="utf-8")
    ]
    save = save_qwen3_style_checkpoint if args.arch == "qwen3" else save_checkpoint
    print(save(args.out, texts, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
