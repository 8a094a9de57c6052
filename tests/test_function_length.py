"""No function of the project (benchmarks and tests aside) runs past MAX_FUNCTION_LINES: a longer one is split into
named steps. A function's length is its `def` line to its last line (decorators not counted), nested functions and
methods each counted on their own."""

from __future__ import annotations

import ast
import subprocess
import textwrap

from searchrl.paths import ROOT

MAX_FUNCTION_LINES = 80
EXEMPT_DIRS = ("benchmarks/", "tests/")


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """Each function in `source` longer than `limit` lines, as (name, lines)."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > limit
    ]


def tracked_sources() -> list[str]:
    files = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return [f for f in files if not f.startswith(EXEMPT_DIRS) and (ROOT / f).is_file()]


def test_no_function_runs_past_the_limit() -> None:
    too_long = [
        f"{path}:{name} ({lines} lines)"
        for path in tracked_sources()
        for name, lines in long_functions((ROOT / path).read_text(encoding="utf-8"))
    ]
    assert not too_long, f"over {MAX_FUNCTION_LINES} lines; split them into named steps:\n" + "\n".join(too_long)


def test_the_checker_finds_a_planted_long_function() -> None:
    def function(name: str, lines: int, prefix: str = "def") -> str:
        return f"{prefix} {name}():\n" + "    x = 0\n" * (lines - 1)

    source = "\n".join(
        [
            "@decorator\n" + function("at_the_limit", MAX_FUNCTION_LINES),
            function("one_over", MAX_FUNCTION_LINES + 1),
            function("awaited", MAX_FUNCTION_LINES + 2, prefix="async def"),
            "class Holder:\n" + textwrap.indent(function("method", MAX_FUNCTION_LINES + 3), "    "),
        ]
    )
    assert long_functions(source) == [
        ("one_over", MAX_FUNCTION_LINES + 1),
        ("awaited", MAX_FUNCTION_LINES + 2),
        ("method", MAX_FUNCTION_LINES + 3),
    ]
