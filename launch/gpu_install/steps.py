"""launch/install_gpu.sh's steps, read from the script itself: each `step NAME pip install ARGS` line is one.

The script is what a user runs and the check resolves, so the two cannot differ; docs show the same commands
(`doc_commands` reads them back from a page for the test that keeps them equal).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from searchrl.paths import ROOT

SCRIPT = ROOT / "launch" / "install_gpu.sh"
# pip options the dry run can pass on unchanged. Anything else in a step is refused by name, so a new option is
# looked at once (does it change what pip resolves?) rather than silently dropped or misread.
FLAGS = {"--no-build-isolation", "--no-deps", "--force-reinstall", "--upgrade", "-U"}
VALUE_OPTIONS = {"-e", "--editable"}
STEP_LINE = re.compile(r"^step\s+(\S+)\s+(.*)$")
# `${NAME:-default}`: the user may override it; the check resolves the default.
DEFAULTED = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:-([^}]*)\}")


class StepError(ValueError):
    """A step line the check cannot read; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class Step:
    name: str
    args: tuple[str, ...]  # after `pip install`
    line: int

    @property
    def command(self) -> str:
        return shlex.join(["pip", "install", *self.args])

    @property
    def no_build_isolation(self) -> bool:
        return "--no-build-isolation" in self.args

    @property
    def no_deps(self) -> bool:
        return "--no-deps" in self.args

    @property
    def requirements(self) -> list[str]:
        """The step's requirement arguments (`-e PATH` gives PATH), options left out."""
        found, args = [], list(self.args)
        while args:
            arg = args.pop(0)
            if arg in VALUE_OPTIONS:
                found.append(args.pop(0))
            elif not arg.startswith("-"):
                found.append(arg)
        return found

    def pins(self) -> dict[str, str]:
        """name -> version for each requirement pinned with `==` (`torch==2.13.0`); local paths and URLs have none."""
        pinned = {}
        for text in self.requirements:
            req = parse_requirement(text)
            exact = [s.version for s in req.specifier if s.operator == "=="] if req else []
            if req and exact:
                pinned[canonicalize_name(req.name)] = exact[0]
        return pinned


def parse_requirement(text: str) -> Requirement | None:
    """A `name<spec>` requirement, or None for a local path (`.[train,gpu]`) or a URL."""
    if text.startswith((".", "/", "~")) or "://" in text:
        return None
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def expand(text: str, where: str) -> str:
    """`${NAME:-default}` becomes its default; any other `$` is refused (the check cannot know its value)."""
    out = DEFAULTED.sub(lambda m: m.group(1), text)
    if "$" in out:
        raise StepError(f"{where}: a shell variable without a default; write it as ${{NAME:-default}}")
    return out


def parse_line(text: str, line: int, where: str) -> Step | None:
    m = STEP_LINE.match(text.strip())
    if not m:
        return None
    name, rest = m.groups()
    words = shlex.split(expand(rest, where), comments=True)
    if words[:2] != ["pip", "install"]:
        raise StepError(f"{where}: step {name}: expected `pip install ...` after the step's name, got {rest!r}")
    args = tuple(words[2:])
    for i, arg in enumerate(args):
        if arg.startswith("-") and arg not in FLAGS | VALUE_OPTIONS and not (i and args[i - 1] in VALUE_OPTIONS):
            raise StepError(
                f"{where}: step {name}: option {arg} is not one the dry run knows; if pip resolves the same with "
                "it, add it to FLAGS in launch/gpu_install/steps.py"
            )
    step = Step(name, args, line)
    if not step.requirements:
        raise StepError(f"{where}: step {name}: no requirement to install")
    return step


def read_steps(script: Path = SCRIPT) -> list[Step]:
    """Every `step` line of the script, in order. Raises StepError naming the line when one cannot be read."""
    steps: list[Step] = []
    for n, text in enumerate(script.read_text(encoding="utf-8").splitlines(), start=1):
        where = f"{script.name}:{n}"
        if (step := parse_line(text, n, where)) is not None:
            if any(s.name == step.name for s in steps):
                raise StepError(f"{where}: step {step.name} appears twice; give each step its own name")
            steps.append(step)
    if not steps:
        raise StepError(f"{script}: no `step NAME pip install ...` line")
    return steps


def doc_commands(text: str) -> list[list[str]]:
    """Every `pip install ...` line of a page's fenced code blocks, as shell words (comments dropped)."""
    found = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M):
        for line in block.splitlines():
            if line.strip().startswith("pip install "):
                found.append(shlex.split(line, comments=True))
    return found
