"""Loading tokenizers, models and datasets that may come from the Hugging Face hub, with errors that say
what to download when the hub cannot be reached (offline machines, HF_HUB_OFFLINE=1, a typo).

transformers and datasets raise a bare OSError / ConnectionError then; the user needs the name of the
thing missing and the command that fetches it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class HubError(ValueError):
    """Something named by a hub id is neither a local path nor in the local Hugging Face cache."""


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


def _offline_note() -> str:
    import os

    flags = [f"{k}=1" for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE") if os.environ.get(k)]
    return f" ({', '.join(flags)} is set)" if flags else ""


def model_error(name: str, what: str, e: BaseException) -> HubError:
    if Path(name).exists():
        return HubError(f"{what} {name!r}: the folder cannot be loaded: {_first_line(e)}")
    return HubError(
        f"{what} {name!r} is not a local folder and is not in the Hugging Face cache, and the hub cannot give it"
        f"{_offline_note()}: {_first_line(e)}. Download it where there is network, e.g. "
        f"`huggingface-cli download {name}` (then copy ~/.cache/huggingface, or pass the downloaded folder), "
        f"or give a local checkpoint folder."
    )


def load_tokenizer(name: str) -> Any:
    """AutoTokenizer from a local folder or a hub name."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name, trust_remote_code=False)
    except OSError as e:
        raise model_error(name, "tokenizer", e) from None


def load_causal_lm(name: str) -> Any:
    """AutoModelForCausalLM (eval mode) from a local folder or a hub name."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(name).eval()
    except OSError as e:
        raise model_error(name, "model", e) from None


def load_dataset_rows(name: str, config: str | None = None, split: str | None = None) -> tuple[str, list[dict]]:
    """The rows of a hub dataset split; without a split, the first of validation, dev, test present.
    Returns the split used and the rows."""
    from datasets import load_dataset

    try:
        loaded = load_dataset(name, config, split=split)
    except (OSError, ConnectionError) as e:
        target = name + (f" (config {config})" if config else "")
        raise HubError(
            f"dataset {target!r} is not in the local Hugging Face cache and the hub cannot give it"
            f"{_offline_note()}: {_first_line(e)}. Download it where there is network, e.g. "
            f"`huggingface-cli download --repo-type dataset {name}`, or export it to a JSONL file "
            f"(question, answer) and pass that path."
        ) from None
    except ValueError as e:
        raise HubError(f"dataset {name!r}: {_first_line(e)}") from None
    if split is None:
        split = next((s for s in ("validation", "dev", "test") if s in loaded), None)
        if split is None:
            raise HubError(f"dataset {name!r}: no validation, dev or test split; name one of {sorted(loaded)}")
        loaded = loaded[split]
    return split, [dict(r) for r in loaded]
