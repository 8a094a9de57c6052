"""A tiny policy for CPU runs: a byte-level BPE tokenizer trained on the given texts and a small
random Llama built from a config. Nothing is downloaded; the same code paths as a real model run.

Byte-level BPE round-trips any text exactly, which the replay engine relies on when it reads the
observation back from token ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from searchrl.paths import EXAMPLES
from searchrl.protocols.r1_searcher import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    BEGIN_DOCS,
    BEGIN_QUERY,
    END_DOCS,
    END_QUERY,
    THINK_CLOSE,
)

PROTOCOL_TOKENS = [BEGIN_QUERY, END_QUERY, BEGIN_DOCS, END_DOCS, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE]


# Qwen2's pre-tokenizer split: a run of punctuation keeps the newlines after it, so BPE learns tokens
# like `|>\n\n` that complete `<|end_of_query|>` and run past it, as the real policy's tokenizer does.
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def build_tokenizer(
    texts: Iterable[str], vocab_size: int = 2000, protocol_tokens: bool = True, qwen_split: bool = False
) -> Any:
    """`protocol_tokens=False, qwen_split=True` gives a tokenizer shaped like Qwen2.5's, where the
    protocol tags are plain text (R1-Searcher adds no tokens) and `>` merges with newlines."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    if qwen_split:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>")
    if protocol_tokens:
        # Protocol tags as single tokens, like the added tokens of a real search-tuned model.
        fast.add_tokens(PROTOCOL_TOKENS)
    return fast


# The random checkpoints' shape (Llama here, Qwen3 in qwen3_stand_in.py): small enough to run an evaluation end to
# end in seconds on a CPU; their answers are noise.
TINY_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}


def build_model(vocab_size: int, seed: int = 0) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size, num_key_value_heads=4, max_position_embeddings=8192, tie_word_embeddings=True,
        **TINY_SHAPE,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


def save_checkpoint(out: Path, texts: Iterable[str], seed: int = 0) -> Path:
    """A tiny checkpoint folder as a training stage writes one (save_pretrained: weights and tokenizer)."""
    tokenizer = build_tokenizer(texts)
    build_model(len(tokenizer), seed).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    p = argparse.ArgumentParser(
        prog="python -m searchrl.tiny_policy.model",
        description="Write a tiny random checkpoint folder (save_pretrained) for CPU runs of the evaluation: "
        "`python -m eval.run_local --model FOLDER --template base --engine hf`. Its answers are noise.",
    )
    p.add_argument("--out", type=Path, default=Path("runs/tiny-checkpoint"), help="checkpoint folder to write")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    texts = [
        json.loads(line).get(key, "")
        for name, key in (("bamboogle_llama_sample.jsonl", "gen_text_store"), ("mini_corpus.jsonl", "text"))
        for line in (EXAMPLES / name).open(encoding="utf-8")
    ]
    print(save_checkpoint(args.out, texts, args.seed))
    return 0


# The policy the training rehearsal trains: Qwen2-shaped (as R1-Searcher's Qwen-2.5 policies), 0.63M
# parameters, small enough that one REINFORCE++ step takes seconds on 2 cores, large enough (3 layers) to copy
# a name into a query and a city out of a passage. The tags stay plain text, as R1-Searcher adds no tokens;
# the tokenizer splits like Qwen2.5's.
POLICY_SHAPE = {"hidden_size": 96, "intermediate_size": 192, "num_hidden_layers": 3, "num_attention_heads": 4}
POLICY_VOCAB = 4000


def build_policy(out: Path, texts: Iterable[str], seed: int = 0) -> Path:
    """A random-init Qwen2-shaped policy with a tokenizer trained on `texts`, saved as a Hugging Face folder."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer(texts, vocab_size=POLICY_VOCAB, protocol_tokens=False, qwen_split=True)
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        **POLICY_SHAPE,
    )
    Qwen2ForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


# ChatML as Qwen2.5's template writes it, its default system message included when a conversation has none.
CHATML = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def save_chat_tokenizer(out: Path, texts: Iterable[str]) -> Path:
    """A tiny tokenizer with a ChatML chat template, where a chat policy's own cannot be fetched (CPU runs)."""
    tokenizer = build_tokenizer(texts, protocol_tokens=False, qwen_split=True)
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(out)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
