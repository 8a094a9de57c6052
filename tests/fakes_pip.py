"""A stand-in for pip, run as `python tests/fakes_pip.py ARGS` through the GPU install check's `--pip`.

It answers from a scenario (JSON at $FAKE_PIP_SCENARIO): for each call whose `--report` file is LABEL.json, the next
of that label's answers (the last one repeats): {"rc", "output", "install": [report entries]}. A call with no
answer succeeds with an empty report. Every call's argv is appended to $FAKE_PIP_CALLS as a JSON line, with its
environment's CUDA_HOME and PIP_CONFIG_FILE, so a test can read what the check asked pip for.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if argv == ["--version"]:
        print("pip 26.3 from tests/fakes_pip.py (python 3.11)")
        return 0
    with open(os.environ["FAKE_PIP_CALLS"], "a", encoding="utf-8") as calls:
        seen = {"argv": argv, "cuda_home": os.environ.get("CUDA_HOME"), "config": os.environ.get("PIP_CONFIG_FILE")}
        calls.write(json.dumps(seen) + "\n")
    report = Path(argv[argv.index("--report") + 1]) if "--report" in argv else None
    if report is None:
        return 0
    label = report.name.removesuffix(".json")
    scenario = json.loads(Path(os.environ["FAKE_PIP_SCENARIO"]).read_text(encoding="utf-8"))
    answers = scenario.get(label) or [{}]
    counts_file = Path(os.environ["FAKE_PIP_CALLS"]).with_suffix(".counts")
    counts = json.loads(counts_file.read_text(encoding="utf-8")) if counts_file.exists() else {}
    answer = answers[min(counts.get(label, 0), len(answers) - 1)]
    counts[label] = counts.get(label, 0) + 1
    counts_file.write_text(json.dumps(counts), encoding="utf-8")
    print(answer.get("output", f"Would install ({label})"))
    if answer.get("rc", 0) == 0:
        report.write_text(json.dumps({"version": "1", "install": answer.get("install", [])}), encoding="utf-8")
    return int(answer.get("rc", 0))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
