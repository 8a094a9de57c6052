"""The layering of docs/ARCHITECTURE.md, checked from the source, file by file: no import circle between any two
files, no import up the layers, and an import inside a function only where it delays a heavy library.

Imports are read with `ast` wherever they stand (module level, functions, `if TYPE_CHECKING:` blocks), so a lazy
import cannot hide an edge. Also checked here: which top-level names an install adds, and that a real job
uploads what its agent reaches and none of the packages that stay home.
"""

from __future__ import annotations

import ast
import shutil
import tomllib
from functools import cache
from pathlib import Path

import pytest

from searchrl.job.plan import HOME_ONLY as PLAN_HOME_ONLY
from searchrl.paths import ROOT

# Lowest first: a module may import modules of its own layer or of layers before it, never after it. A module
# belongs to the longest prefix that names it (`searchrl.rollout.agent` to `searchrl.rollout`, `searchrl.paths`
# to the core, `searchrl`).
LAYERS = (
    # The core: imports nothing else of the project.
    "searchrl",
    # The training rehearsal's CPU layer: shipped to rehearsal jobs only; it imports the core alone.
    "searchrl.rehearsal.cpu",
    # The libraries: the search interface, the reward, the search backends, routing, the stage and the episode.
    "searchrl.search",
    # The search library above its interface: encoders, the index, web providers, the backends by name.
    # One layer of several packages (BM25 opens an index folder; the index build writes BM25's).
    (
        "searchrl.search.encode",
        "searchrl.search.bm25",
        "searchrl.search.index",
        "searchrl.search.web",
        "searchrl.search.local_faiss",
        "searchrl.search.hybrid",
        "searchrl.search.backends",
    ),
    "searchrl.protocols",
    "searchrl.reward",
    "searchrl.episodes",
    "searchrl.routing",
    "searchrl.stage",
    "searchrl.rollout",
    "searchrl.qa_data",
    "stage1_format",
    "stage2_answer",
    "stage_router_r1",
    "searchrl.tiny_policy",
    "searchrl.job",
    # The services: no library imports them.
    "search_backend",
    "reward_server",
    "eval",
    "searchrl.rehearsal",
    "searchrl.view",
    "launch",
    "benchmarks",
)
# The design's folders and the stage folders OpenRLHF loads agent files from: the only top-level names of ours.
TOP_LEVEL = {"searchrl", "search_backend", "reward_server", "stage1_format", "stage2_answer", "stage_router_r1",
             "eval", "launch", "benchmarks"}  # fmt: skip
# OpenRLHF loads these by path from the Ray working_dir, where the project root is not on sys.path yet.
AGENT_ENTRY_FILES = ("stage1_format/agent_func.py", "stage2_answer/agent_func.py", "stage_router_r1/agent_func.py")
# Libraries whose import costs seconds or needs a GPU stack: the only reason an import of ours may sit in a function
# (the module imported pulls one of these in at its own module level, directly or through ours).
HEAVY = {"torch", "transformers", "vllm", "deepspeed", "ray", "openrlhf", "faiss", "sentence_transformers",
         "datasets", "matplotlib", "tensorboard", "torch_geometric", "sklearn", "scipy", "bm25s", "peft",
         "tokenizers"}  # fmt: skip
# Packages a real job leaves home: its workers never import them.
HOME_ONLY = tuple(p.strip("/").replace("/", ".") for p in PLAN_HOME_ONLY)
RANK = {"top": 0, "typing": 1, "function": 2, "load": 3}


def module_name(file: Path, root: Path = ROOT) -> str:
    parts = list(file.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of ours, by dotted name."""
    found = {}
    for top in TOP_LEVEL:
        for file in sorted((root / top).rglob("*.py")):
            found[module_name(file, root)] = file
    return found


def prefixes(layer: str | tuple[str, ...]) -> tuple[str, ...]:
    """A layer's packages: one, or several side by side (a tuple)."""
    return (layer,) if isinstance(layer, str) else layer


def layer_of(module: str) -> str | tuple[str, ...]:
    """The layer of the longest package prefix that holds `module`."""
    held = [(p, layer) for layer in LAYERS for p in prefixes(layer) if module == p or module.startswith(p + ".")]
    return max(held, key=lambda found: len(found[0]))[1]


def _guarded_by_main(node: ast.If) -> bool:
    test = node.test
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


# Loads whose target is not a literal, each with what it loads and why it is not an import. Any other load by name or
# path fails `test_every_load_by_path_is_read`: its target is then invisible to the layering.
DYNAMIC_LOADS = {
    ("searchrl/rollout/agent.py", "spec_from_file_location"): "an agent file by path, as OpenRLHF's engine does",
    ("searchrl/rehearsal/job.py", "spec_from_file_location"): "an agent file by path, as OpenRLHF's actor does",
    ("searchrl/rehearsal/cpu/launch.py", "run_module"): "an OpenRLHF entry module, under the CPU layer",
    ("searchrl/rehearsal/cpu/deepspeed_ops.py", "import_module"): "a DeepSpeed module (a literal, not ours)",
    ("searchrl/search/encode/onnx_encoder.py", "__import__"): "an optional library, to report it missing",
    ("launch/cli.py", "import_module"): "the command table's modules: edges of launch.cli (cli_edges)",
    ("benchmarks/peers.py", "spec_from_file_location"): "a peer project's file, measured beside ours",
}
LOADERS = {"import_module", "__import__", "run_module", "run_path", "spec_from_file_location"}
UNREAD = "<not a literal>"


def loader_name(call: ast.Call) -> str | None:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name if name in LOADERS else None


def dynamic_load(call: ast.Call) -> str | None:
    """The module a load by name or path reads ("a.b" from `import_module("a.b")`, "a.b" from
    `spec_from_file_location(_, "a/b.py")`), UNREAD where its argument is not a literal, None for other calls."""
    name = loader_name(call)
    if name is None:
        return None
    args = [*call.args, *(k.value for k in call.keywords)]
    arg = args[1] if name == "spec_from_file_location" and len(args) > 1 else args[0] if args else None
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
        return UNREAD
    value = arg.value
    if name in ("run_path", "spec_from_file_location") or value.endswith(".py"):
        value = value.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return value


def imports_of(tree: ast.Module, package: str) -> list[tuple[int, str, str]]:
    """(line, imported name, where: "top", "function", "typing" or "load") for every import in the tree; `from a
    import b` gives `a.b`, which is resolved to module `a` where `a.b` is not one (so a package's `__init__` is an edge
    exactly when a name is taken from it). A load by name or path (`importlib.import_module`, `runpy`,
    `spec_from_file_location`, `__import__`) counts as an import of what it loads: `dynamic_load`. A file's own
    `__main__` block is left out: it runs as a script, never on import."""
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, ast.If) and _guarded_by_main(node):
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, where) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.extend((node.lineno, f"{base}.{alias.name}", where) for alias in node.names)
        elif isinstance(node, ast.Call) and (loaded := dynamic_load(node)) is not None:
            found.append((node.lineno, loaded, "load"))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            where = "function"
        elif isinstance(node, ast.If) and _type_checking(node) and where == "top":
            where = "typing"
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, "top")
    return found


def cli_edges(root: Path) -> list[str]:
    """The modules launch/cli.py's command table imports by name when a command runs."""
    tree = ast.parse((root / "launch" / "cli.py").read_text(encoding="utf-8"))
    return [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "Command"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]


@cache
def graph(root: Path = ROOT) -> dict[str, dict[str, tuple[str, str]]]:
    """module -> {imported module of ours: (file:line, "top", "function", "typing" or "load": how it is first met)}. An
    import of a module's own package counts too: a package whose `__init__` imports the module that imports it
    back is a circle (an ImportError, depending on which is imported first)."""
    ours = modules(root)
    edges: dict[str, dict[str, tuple[str, bool]]] = {}
    for module, file in ours.items():
        package = module if file.name == "__init__.py" else module.rpartition(".")[0]
        out: dict[str, tuple[str, str]] = {}
        found = imports_of(ast.parse(file.read_text(encoding="utf-8")), package)
        if module == "launch.cli":
            found += [(0, name, "load") for name in cli_edges(root)]
        for line, name, kind in found:
            if name.split(".")[0] not in TOP_LEVEL:
                continue
            target = name
            while target and target not in ours:
                target = target.rpartition(".")[0]
            if not target or target == module:
                continue
            where = f"{file.relative_to(root)}:{line}"
            previous = out.get(target)
            if previous is None or RANK[kind] < RANK[previous[1]]:
                out[target] = (where, kind)
        edges[module] = out
    return edges


@cache
def third_party(module: str) -> frozenset[str]:
    """The top-level libraries a module of ours imports at its own module level."""
    file = modules()[module]
    package = module if file.name == "__init__.py" else module.rpartition(".")[0]
    found = imports_of(ast.parse(file.read_text(encoding="utf-8")), package)
    names = {n.split(".")[0] for _, n, kind in found if kind == "top"}
    return frozenset(names - TOP_LEVEL)


def loads_heavy(module: str) -> bool:
    """Whether importing the module pulls in a heavy library, through module-level imports only."""
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        if third_party(m) & HEAVY:
            return True
        todo += [t for t, (_, kind) in graph()[m].items() if kind == "top"]
    return False


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one node: the import circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_strongly_connected_finds_circles() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b", "c"}, "b": {"c"}}) == []


def test_imports_of_reads_every_form() -> None:
    code = (
        "import searchrl.protocol\nfrom searchrl import metrics\nfrom . import x\n"
        "def f():\n    from searchrl.search.base import Passage\n"
        "if __name__ == '__main__':\n    import launch.cli\n"
    )
    code += "import importlib\nm = importlib.import_module('eval.runner')\n"
    code += "s = importlib.util.spec_from_file_location('a', 'stage1_format/agent_func.py')\nimportlib.reload(m)\n"
    found = imports_of(ast.parse(code), "searchrl.job")
    assert (1, "searchrl.protocol", "top") in found and (2, "searchrl.metrics", "top") in found
    assert (3, "searchrl.job.x", "top") in found and (5, "searchrl.search.base.Passage", "function") in found
    assert (9, "eval.runner", "load") in found and (10, "stage1_format.agent_func", "load") in found
    assert not [n for _, n, _ in found if n.startswith("launch")] and len(found) == 7, found


def test_every_package_has_a_layer() -> None:
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and any(p.glob("*.py")) and p.name != "tests"}
    assert folders <= TOP_LEVEL, f"a new top-level package {sorted(folders - TOP_LEVEL)}: put it under searchrl/"
    for top in TOP_LEVEL:
        assert any(p == top or p.startswith(top + ".") for layer in LAYERS for p in prefixes(layer)), top
    for module in modules():
        assert layer_of(module), module


def circles(root: Path = ROOT) -> list[str]:
    edges = graph(root)
    shown = []
    for circle in strongly_connected({m: set(out) for m, out in edges.items()}):
        inside = set(circle)
        lines = [f"{m} -> {t} ({w})" for m in circle for t, (w, _) in edges[m].items() if t in inside]
        shown.append(" <-> ".join(circle) + "\n  " + "\n  ".join(lines))
    return shown


def upward(root: Path = ROOT) -> list[str]:
    return sorted(
        f"{where}: {module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
        for module, out in graph(root).items()
        for target, (where, _) in out.items()
        if LAYERS.index(layer_of(target)) > LAYERS.index(layer_of(module))
    )


def unread_loads(root: Path = ROOT) -> list[str]:
    """Loads by name or path whose target the layering cannot read and that DYNAMIC_LOADS does not explain."""
    found = []
    for file in modules(root).values():
        rel = file.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and dynamic_load(node) == UNREAD:
                if (rel, loader_name(node)) not in DYNAMIC_LOADS:
                    found.append(f"{rel}:{node.lineno}: {loader_name(node)}")
    return found


def test_no_import_circle_between_files() -> None:
    shown = circles()
    assert not shown, "import circles between files:\n" + "\n".join(shown)


def test_imports_go_down_the_layers() -> None:
    found = upward()
    assert not found, "imports against the layering of docs/ARCHITECTURE.md:\n" + "\n".join(found)


def test_every_load_by_path_is_read() -> None:
    found = unread_loads()
    assert not found, (
        "loads whose target the layering cannot read (use a literal, or explain it in DYNAMIC_LOADS):\n"
        + ("\n".join(found))
    )
    # Every explained load still exists: an entry left behind would excuse the next one in that file.
    seen = set()
    for file in modules().values():
        rel = file.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and loader_name(node):
                seen.add((rel, loader_name(node)))
    assert set(DYNAMIC_LOADS) <= seen, sorted(set(DYNAMIC_LOADS) - seen)


def tree_copy(dest: Path) -> Path:
    for top in TOP_LEVEL:
        shutil.copytree(ROOT / top, dest / top, ignore=shutil.ignore_patterns("__pycache__", "results", "fixtures"))
    return dest


def test_the_checks_see_a_circle_through_an_init_and_loads_by_path(tmp_path) -> None:
    """What the checks once missed, injected into a copy of the tree: each must fail there."""
    root = tree_copy(tmp_path / "clean")
    assert circles(root) == [] and upward(root) == [] and unread_loads(root) == []
    root = tree_copy(tmp_path / "circle")
    # A package whose __init__ imports a module that takes a name back from the package: an ImportError when the
    # module is imported first, and once invisible (an edge to a module's own package was skipped).
    init = root / "searchrl" / "search" / "__init__.py"
    init.write_text(init.read_text() + "from searchrl.search.base import Passage\n\nDEFAULT = Passage\n")
    base = root / "searchrl" / "search" / "base.py"
    base.write_text(base.read_text() + "\nfrom searchrl.search import DEFAULT  # noqa\n")
    assert any(c.startswith("searchrl.search <-> searchrl.search.base") for c in circles(root)), circles(root)

    # A load by name of a module up the layers, and a load by a path the check cannot read.
    root = tree_copy(tmp_path / "loads")
    metrics = root / "searchrl" / "metrics.py"
    metrics.write_text(metrics.read_text() + "\nimport importlib\n\ncli = importlib.import_module('launch.cli')\n")
    assert any("searchrl.metrics (searchrl) imports launch.cli (launch)" in u for u in upward(root)), upward(root)
    scoring = root / "searchrl" / "reward" / "scoring.py"
    scoring.write_text(scoring.read_text() + "\nimport runpy\n\nPATH = 'x.py'\nrunpy.run_path(PATH)\n")
    assert [u.split(":")[0] for u in unread_loads(root)] == ["searchrl/reward/scoring.py"], unread_loads(root)
    root = tree_copy(tmp_path / "path")
    scoring = root / "searchrl" / "reward" / "scoring.py"
    scoring.write_text(scoring.read_text() + "\nimport runpy\n\nrunpy.run_path('eval/runner.py')\n")
    assert unread_loads(root) == [] and any("scoring (searchrl.reward) imports eval.runner" in u for u in upward(root))


def started_by_name(tree: ast.AST) -> list[tuple[int, str]]:
    """The modules a file starts as processes by name: `start_module`'s first argument and what follows "-m" in a
    list; an f-string reads as its literal parts with `{}` for each value, anything else as UNREAD."""

    def read(node: ast.AST) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        return UNREAD

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "start_module" and node.args:
            found.append((node.lineno, read(node.args[0])))
        if isinstance(node, ast.List | ast.Tuple):
            pairs = zip(node.elts, node.elts[1:], strict=False)
            found += [(b.lineno, read(b)) for a, b in pairs if isinstance(a, ast.Constant) and a.value == "-m"]
    return found


def services_started_by_name(root: Path = ROOT) -> list[str]:
    """Process starts under searchrl/ that name a design folder's module, or one made up from values (a name passed
    on, `start_module(module, ...)`, is checked where its literal is written): a library starts a service through
    its public command (`searchrl search serve`), as a user would."""
    design = tuple(TOP_LEVEL - {"searchrl"})
    found = []
    for file in sorted((root / "searchrl").rglob("*.py")):
        for line, module in started_by_name(ast.parse(file.read_text(encoding="utf-8"))):
            top = module.split(".")[0]
            if module != UNREAD and ("{}" in top or top in design):
                found.append(f"{file.relative_to(root)}:{line}: {module}")
    return found


def test_no_library_starts_a_design_folders_module_by_name(tmp_path) -> None:
    assert services_started_by_name() == []
    root = tree_copy(tmp_path / "started")
    planted = root / "searchrl" / "rehearsal" / "inputs.py"
    planted.write_text(
        planted.read_text(encoding="utf-8")
        + "\n\ndef planted(package):\n    return [sys.executable, '-m', f'{package}.prepare_data'],"
        + " start_module('reward_server', [], 1)\n"
    )
    assert [f.split(": ")[1] for f in services_started_by_name(root)] == ["{}.prepare_data", "reward_server"]


def test_an_import_in_a_function_delays_a_heavy_library() -> None:
    """Imports of ours stand at the top of the file unless the module imported is heavy to load. Benchmarks are
    exempt: a measuring script decides what its measured process has loaded, and when (thread settings before a
    library starts its pools, an in-process block that counts its own imports)."""
    light = [
        f"{where}: {target}"
        for module, out in graph().items()
        for target, (where, kind) in out.items()
        if kind == "function" and not loads_heavy(target) and not module.startswith("benchmarks.")
    ]
    assert not light, "move these imports to the top of their files (nothing heavy is delayed):\n" + "\n".join(
        sorted(light)
    )


def test_core_imports_nothing_of_ours() -> None:
    ours = [f"{w}: {t}" for m, out in graph().items() if layer_of(m) == "searchrl" for t, (w, _) in out.items()]
    assert not [o for o in ours if layer_of(o.split(": ")[1]) != "searchrl"], ours


def test_an_install_adds_only_the_design_top_level_names() -> None:
    from setuptools import find_packages

    found = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    packages = find_packages(str(ROOT), include=found["find"]["include"])
    tops = {p.split(".")[0] for p in packages}
    assert tops == TOP_LEVEL - {"benchmarks"}, tops
    assert "searchrl.rehearsal.cpu" in packages and "searchrl.routing.gmtrouter" in packages


def agent_closure() -> set[str]:
    """Every module of ours the agent entry files reach, through any import."""
    todo = [module_name(ROOT / f) for f in AGENT_ENTRY_FILES]
    seen: set[str] = set()
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += list(graph()[m])
            # A module's packages run their __init__ on import too.
            parts = m.split(".")
            todo += [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in modules()]
    return seen


def test_the_agent_reaches_nothing_that_stays_home() -> None:
    home = sorted(m for m in agent_closure() if m.startswith(HOME_ONLY))
    assert not home, f"the agent reaches packages a real job leaves home: {home}"


@pytest.mark.parametrize("stage", ["stage1", "stage2", "router_r1"])
def test_a_real_submit_uploads_what_its_workers_run_and_nothing_else(stage, tmp_path) -> None:
    from searchrl.job.plan import plan_stage, runtime_env
    from searchrl.job.preflight import build_package

    env = runtime_env(plan_stage(stage, None, ["init_from=null"]))
    files = set(build_package(env, tmp_path / "package.zip").files)
    needed = {str(modules()[m].relative_to(ROOT)) for m in agent_closure()}
    assert needed <= files, f"the job would miss {sorted(needed - files)}"
    home = sorted(f for f in files if f.replace("/", ".").startswith(HOME_ONLY))
    assert not home, f"a real job uploads code that stays home: {home[:10]}"
    assert not [f for f in files if f.startswith(("tests/", "benchmarks/", "launch/", "examples/", "docs/"))]
    assert {"configs/stages/stage1_format.yaml", "pyproject.toml"} <= files


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
    for file in modules().values():
        rel = file.relative_to(ROOT).as_posix()
        if rel in AGENT_ENTRY_FILES:
            continue
        offenders += [f"{rel}:{line}" for line in edits_sys_path(ast.parse(file.read_text(encoding="utf-8")))]
    assert not offenders, "run scripts as modules (python -m package.script) instead of editing sys.path: " + str(
        offenders
    )


def test_the_repository_paths_are_known_in_one_place() -> None:
    """`Path(__file__)` climbing to the checkout's root appears only in searchrl/paths.py (and the agent entry
    files, which must find the root before they can import anything)."""
    offenders = []
    for file in [*modules().values(), *sorted((ROOT / "tests").rglob("*.py"))]:
        rel = file.relative_to(ROOT).as_posix()
        text = file.read_text(encoding="utf-8")
        if rel in (*AGENT_ENTRY_FILES, "searchrl/paths.py", "tests/test_architecture.py"):
            continue
        if "Path(__file__).resolve().parent.parent" in text or "Path(__file__).parent.parent" in text:
            offenders.append(rel)
        if "Path(__file__).resolve().parents[1]" in text:
            offenders.append(rel)
    assert not offenders, f"use searchrl.paths (ROOT, CONFIGS, EXAMPLES, RUNS): {offenders}"
