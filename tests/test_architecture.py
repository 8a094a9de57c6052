"""The layering of docs/ARCHITECTURE.md, checked from the source: imports between top-level packages go one
way (down the list below), so no two packages import each other, and the core imports nothing of ours.

Imports are read with `ast`, function-level ones included, so a lazy import cannot hide an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Lowest first: a package may import those before it, never one after it.
LAYERS = (
    "searchrl",
    # The training rehearsal's CPU layer: shipped to rehearsal jobs only; it imports the core alone, and no
    # package imports it (the rehearsal names it by path), so no real job's upload reaches it.
    "rehearsal_cpu",
    "search_backend",
    "routing",
    "reward_server",
    "rollout",
    "stage1_format",
    "stage2_answer",
    "stage_router_r1",
    "eval",
    "launch",
    "benchmarks",
)
# OpenRLHF loads these by path from the Ray working_dir, where the project root is not on sys.path yet.
AGENT_ENTRY_FILES = ("stage1_format/agent_func.py", "stage2_answer/agent_func.py", "stage_router_r1/agent_func.py")


def python_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def package_edges() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) -> where, for every import of one top-level package by another."""
    edges: dict[tuple[str, str], list[str]] = {}
    for package in LAYERS:
        for file in python_files(package):
            for line, module in imported_modules(ast.parse(file.read_text(encoding="utf-8"))):
                target = module.split(".")[0]
                if target in LAYERS and target != package:
                    edges.setdefault((package, target), []).append(f"{file.relative_to(ROOT)}:{line} {module}")
    return edges


def find_cycle(edges: dict[tuple[str, str], list[str]]) -> list[str] | None:
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def test_find_cycle_finds_one() -> None:
    assert find_cycle({("a", "b"): [], ("b", "c"): [], ("c", "a"): []}) == ["a", "b", "c", "a"]
    assert find_cycle({("a", "b"): [], ("a", "c"): [], ("b", "c"): []}) is None


def test_every_package_is_listed() -> None:
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and any(p.glob("*.py")) and p.name != "tests"}
    assert packages <= set(LAYERS), f"place {sorted(packages - set(LAYERS))} in LAYERS and docs/ARCHITECTURE.md"


def test_no_import_cycle_between_packages() -> None:
    edges = package_edges()
    cycle = find_cycle(edges)
    if cycle is not None:
        where = [f"{a} -> {b}: {edges[(a, b)][0]}" for a, b in zip(cycle, cycle[1:], strict=False)]
        raise AssertionError("import cycle " + " -> ".join(cycle) + "\n" + "\n".join(where))


def test_imports_go_down_the_layers() -> None:
    upward = [
        f"{a} imports {b} ({where[0]})"
        for (a, b), where in package_edges().items()
        if LAYERS.index(b) > LAYERS.index(a)
    ]
    assert not upward, "imports against the layering of docs/ARCHITECTURE.md:\n" + "\n".join(upward)


def test_the_job_uploads_every_package_the_agent_files_reach() -> None:
    from searchrl.job.submit import UPLOAD

    edges = package_edges()
    reached, todo = set(), [f.split("/")[0] for f in AGENT_ENTRY_FILES]
    while todo:
        package = todo.pop()
        if package not in reached:
            reached.add(package)
            todo += [b for a, b in edges if a == package]
    assert reached <= set(UPLOAD), f"add {sorted(reached - set(UPLOAD))} to searchrl/job/submit.py UPLOAD"


def test_core_imports_nothing_of_ours() -> None:
    ours = [f"{b}: {where}" for (a, b), where in package_edges().items() if a == "searchrl"]
    assert not ours, f"searchrl must import nothing else of the project: {ours}"


def edits_sys_path(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
        elif isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            target = next((t.value if isinstance(t, ast.Subscript) else t for t in targets), None)
        if (
            isinstance(target, ast.Attribute)
            and target.attr == "path"
            and isinstance(target.value, ast.Name)
            and target.value.id == "sys"
        ):
            lines.append(node.lineno)
    return sorted(lines)


def test_edits_sys_path_sees_the_usual_forms() -> None:
    code = "import sys\nsys.path.insert(0, 'x')\nsys.path.append('y')\nsys.path = []\nsys.path[:0] = ['z']\nn = 1"
    assert edits_sys_path(ast.parse(code)) == [2, 3, 4, 5]


def test_no_sys_path_edits_outside_tests_and_agent_entry_files() -> None:
    offenders = []
    for file in sorted(ROOT.rglob("*.py")):
        rel = file.relative_to(ROOT).as_posix()
        if rel.startswith(("tests/", ".venv/", "runs/")) or "/." in f"/{rel}" or rel in AGENT_ENTRY_FILES:
            continue
        offenders += [f"{rel}:{line}" for line in edits_sys_path(ast.parse(file.read_text(encoding="utf-8")))]
    assert not offenders, "run scripts as modules (python -m package.script) instead of editing sys.path: " + str(
        offenders
    )
