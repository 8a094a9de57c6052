"""Reading result files: JSON lines, with the line number in every error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class RecordError(ValueError):
    pass


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise RecordError(f"{p}: no such file")
    with p.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise RecordError(f"{p}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(record, dict):
                raise RecordError(f"{p}:{lineno}: expected a JSON object, got {type(record).__name__}")
            yield record


def field(record: dict[str, Any], key: str, where: str) -> Any:
    if key not in record:
        raise RecordError(f"{where}: no key {key!r} (keys: {sorted(record)}); choose the key with the matching flag")
    return record[key]
