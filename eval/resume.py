"""What an output folder's results were made with (`run.json`), so a resumed run never mixes settings.

Resuming skips the questions already in the folder; if the model, prompt template, episode settings or
search backend changed in between, the folder would hold two experiments under one figure. A resume
with different settings is refused, naming the keys; `--force-new` moves the old results aside.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from searchrl.stage.search import SEARCH_KINDS

RUN_FILE = "run.json"
# Files a run writes; --force-new moves exactly these.
RESULT_GLOBS = ("*.jsonl", "*.summary.json", "results.md", "results.png", RUN_FILE)


class SettingsMismatch(ValueError):
    """The output folder holds results made with other settings."""


def has_results(out: Path) -> bool:
    return any(p.stat().st_size > 0 for p in out.glob("*.jsonl"))


def differing(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Keys whose values differ. For `search`, two index identities are compared when both are known
    (a retrieval server that moved to another port still serves the same index)."""
    keys = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if key == "search" and isinstance(a, dict) and isinstance(b, dict):
            if a.get("backend") != b.get("backend"):
                keys.append("search.backend")
            elif a.get("index") and b.get("index") and a["index"] != b["index"]:
                keys.append("search.index")
            elif a.get("options") != b.get("options"):
                keys.append("search.options")
        elif a != b:
            keys.append(key)
    return keys


def move_aside(out: Path) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    aside = out / f"replaced-{stamp}"
    aside.mkdir()
    for pattern in RESULT_GLOBS:
        for path in out.glob(pattern):
            path.rename(aside / path.name)
    return aside


def check_resume(out: Path, identity: dict[str, Any], force_new: bool = False) -> str | None:
    """Refuse a resume under other settings; write `run.json`. Returns a note for the console, if any."""
    out.mkdir(parents=True, exist_ok=True)
    run_file = out / RUN_FILE
    note = None
    if has_results(out):
        old = json.loads(run_file.read_text()) if run_file.is_file() else None
        keys = differing(old, identity) if old is not None else []
        if force_new:
            note = f"--force-new: earlier results moved to {move_aside(out)}"
        elif keys:
            shown = ", ".join(f"{k} ({_get(old, k)!r} -> {_get(identity, k)!r})" for k in keys)  # type: ignore[arg-type]
            raise SettingsMismatch(
                f"{out} holds results made with other settings: {shown}. Resuming would mix the two; "
                f"use another --out, or --force-new to move the old results aside and start again"
            )
        elif old is None:
            note = f"{out}: results from a run that recorded no settings; resuming with the current ones"
        elif old.get("search", {}).get("index") and not identity.get("search", {}).get("index"):
            identity = {**identity, "search": old["search"]}  # keep the known index identity
    run_file.write_text(json.dumps(identity, indent=2, sort_keys=True))
    return note


def _get(d: dict[str, Any], dotted: str) -> Any:
    node: Any = d
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def search_identity(config: Any) -> dict[str, Any]:
    """What a search config searches: the index (read from its manifest, or from the retrieval server's
    /health), the web provider and its options, or the routed models; each backend kind says (`identity`)."""
    return SEARCH_KINDS[config.backend].identity(config)
