"""Questions and golds from verl's prompt-dataset rows, as Search-R1 and Router-R1 publish their data: `prompt` (chat
messages, the last user message ending in `Question: ...`), `reward_model.ground_truth.target` (the golds) and
`data_source`."""

from __future__ import annotations

from typing import Any

from searchrl.jsonl import RecordError

QUESTION_MARKER = "Question:"


def is_verl_row(row: dict[str, Any]) -> bool:
    return isinstance(row.get("prompt"), list) and isinstance(row.get("reward_model"), dict)


def verl_question(row: dict[str, Any], where: str, source: str = "") -> dict[str, Any]:
    """{question, answer, data_source} of one row: the question is what follows the last `Question:` of its last
    message (its instruction comes before it), the golds are `reward_model.ground_truth.target`."""
    try:
        content = row["prompt"][-1]["content"]
        golds = row["reward_model"]["ground_truth"]["target"]
    except (KeyError, IndexError, TypeError):
        raise RecordError(f"{where}: expected verl's prompt[].content and reward_model.ground_truth.target") from None
    if QUESTION_MARKER not in content:
        raise RecordError(f"{where}: prompt: no `{QUESTION_MARKER}` line to take the question from")
    question = content.rsplit(QUESTION_MARKER, 1)[1].strip()
    answer = [golds] if isinstance(golds, str) else [str(g) for g in golds]
    # The row's own messages (its instruction, any system turn), which data preparation may render as they are.
    messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in row["prompt"]]
    return {"question": question, "answer": answer, "data_source": str(row.get("data_source") or source),
            "messages": messages}  # fmt: skip
