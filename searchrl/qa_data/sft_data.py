"""`searchrl data prepare sft`: trajectories in the protocol as OpenRLHF's multi-turn SFT dataset, the retrieved
documents kept out of the loss as in RL (each documents block a `tool` turn)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from searchrl.config import ConfigError, load
from searchrl.jsonl import RecordError, read_jsonl
from searchrl.paths import CONFIGS
from searchrl.protocols import DEFAULT_PROTOCOL, PROTOCOL_NAMES, TagProtocol, get_protocol
from searchrl.stage.config import ModelConfig
from searchrl.stage.templates import load_tokenizer, render_prompt


def trajectory_messages(
    prompt: str, solution: str, eos: str, protocol: TagProtocol | None = None
) -> list[dict[str, str]]:
    """A trajectory in the protocol (R1-Searcher's by default) as OpenRLHF SFT messages: each documents block (with
    the newlines after it) is a `tool` turn, kept out of the loss; the policy's text between blocks is `assistant`
    turns. The newlines a policy writes before a block stay with it, as they do in a rollout (a Qwen
    token merges them with `|>`). The last turn ends with `eos` when the trajectory ended with an answer."""
    protocol = protocol or get_protocol(DEFAULT_PROTOCOL)
    opening, closing = protocol.DOCUMENTS_OPEN, protocol.DOCUMENTS_CLOSE
    messages = [{"role": "user", "content": prompt}]
    rest = solution
    while opening in rest:
        head, tail = rest.split(opening, 1)
        if closing not in tail:
            break
        body, rest = tail.split(closing, 1)
        after = len(rest) - len(rest.lstrip("\n"))
        messages.append({"role": "assistant", "content": head})
        messages.append({"role": "tool", "content": opening + body + closing + rest[:after]})
        rest = rest[after:]
    ended = protocol.answered(rest)
    messages.append({"role": "assistant", "content": rest.rstrip() + eos if ended else rest})
    return [m for m in messages if m["content"]]


def main(argv: list[str] | None = None) -> int:
    """`searchrl data prepare sft`: trajectories in the protocol -> OpenRLHF's multi-turn SFT dataset."""

    p = argparse.ArgumentParser(prog="searchrl data prepare sft", description=main.__doc__.split(": ", 1)[1])
    p.add_argument("--input", required=True, help="JSONL: R1-Searcher's released trajectories (question, "
                   "gen_text_store) or yours (prompt or question, solution)")  # fmt: skip
    p.add_argument("--out", type=Path, required=True, help="the dataset to write (JSONL, a `messages` list a line)")
    p.add_argument("--model", default=str(CONFIGS / "models/qwen2.5-7b-base.yaml"), help="its template renders "
                   "the prompt from `question`; its tokenizer gives the EOS the last turn ends with")  # fmt: skip
    p.add_argument("--eos", default=None, help="the EOS text (default: the model tokenizer's)")
    p.add_argument("--protocol", choices=PROTOCOL_NAMES, default=DEFAULT_PROTOCOL, help="the tags the trajectories "
                   "are written in: its documents blocks become tool turns")  # fmt: skip
    args = p.parse_args(argv)
    try:
        model = load(ModelConfig, args.model)
        eos = args.eos
        tokenizer = None
        if eos is None or model.kind == "chat":
            tokenizer = load_tokenizer(model)
            eos = eos if eos is not None else tokenizer.eos_token
        rows = []
        for i, r in enumerate(read_jsonl(args.input), start=1):
            solution = r.get("gen_text_store", r.get("solution"))
            if not isinstance(solution, str):
                raise RecordError(f"{args.input}: record {i}: needs `gen_text_store` or `solution` (a string)")
            prompt = r.get("prompt") or render_prompt(model, r.get("question", ""), tokenizer)
            if not prompt or not (r.get("prompt") or r.get("question")):
                raise RecordError(f"{args.input}: record {i}: needs `prompt` or `question`")
            messages = trajectory_messages(prompt, solution, eos, get_protocol(args.protocol))
            rows.append({"messages": messages, "label": r.get("answer")})
    except (ConfigError, RecordError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    print(json.dumps({"out": str(args.out), "trajectories": len(rows), "model": model.name, "eos": eos}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
