"""OpenRLHF's own `train_ppo_ray` argument parser, rebuilt without importing the module.

Importing it would pull in Ray, DeepSpeed and vLLM. Instead the statements that build the parser
(the `__main__` block up to `parse_args()`) are taken from the installed source with `ast` and run
alone, so every rendered flag is checked by the real parser: names, types and choices.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
import threading
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

# CPython before 3.11.8 keeps the AST validator's recursion depth in state the threads share (gh-106905): two threads
# parsing or compiling at once fail with "AST constructor recursion depth mismatch", as a stage and its lr = 0 control
# planned side by side once did. Every parse and compile of OpenRLHF's source here holds this lock.
AST_LOCK = threading.RLock()

VERSION = "0.11.2"


def _source_path() -> Path:
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"openrlhf is not installed: pip install --no-deps openrlhf=={VERSION}")
    return Path(next(iter(spec.submodule_search_locations))) / "cli" / "train_ppo_ray.py"


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print and exit
        raise ValueError(message)


def _parser_statements(tree: ast.Module) -> list[ast.stmt]:
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            body = []
            for stmt in node.body:
                if "parse_args" in ast.unparse(stmt):
                    return body
                body.append(stmt)
    raise RuntimeError("train_ppo_ray: no parser-building __main__ block found (OpenRLHF changed its layout)")


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        return [node.module or "."]
    return [alias.name for alias in node.names]


def _stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


def build_parser(path: str | None = None) -> argparse.ArgumentParser:
    with AST_LOCK:
        return _build_parser(path)


@cache
def _build_parser(path: str | None = None) -> argparse.ArgumentParser:
    source = Path(path) if path else _source_path()
    tree = ast.parse(source.read_text(encoding="utf-8"))
    namespace: dict[str, Any] = {"argparse": argparse}
    # The parser code may use the module's standard-library imports (datetime for a default run
    # name); the others (ray, torch, openrlhf) are left out, which is the point of not importing it.
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom) and all(_stdlib(n) for n in _imported(node)):
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(source), "exec"), namespace)  # noqa: S102
    module = ast.Module(body=_parser_statements(tree), type_ignores=[])
    exec(compile(module, str(source), "exec"), namespace)  # noqa: S102 - OpenRLHF's own parser code
    parser = namespace["parser"]
    parser.__class__ = _RaisingParser
    return parser


def parser_flags(path: str | None = None) -> dict[str, argparse.Action]:
    """Flag name (without `--`) -> its argparse action, for every option of the parser."""
    return {opt[2:]: a for a in build_parser(path)._actions for opt in a.option_strings if opt.startswith("--")}


def unknown_flags(names: Sequence[str] | Mapping[str, Any], path: str | None = None) -> list[str]:
    known = parser_flags(path)
    return [n for n in names if n not in known]


def render_flags(values: Mapping[str, Any], path: str | None = None) -> list[str]:
    """`--name value` arguments for the given flags; booleans become bare switches (or are left out)."""
    bad = unknown_flags(values, path)
    if bad:
        raise ValueError(f"not flags of OpenRLHF {VERSION}'s train_ppo_ray: {', '.join(bad)}")
    known = parser_flags(path)
    args: list[str] = []
    for name, value in values.items():
        if isinstance(known[name], argparse._StoreTrueAction | argparse._StoreFalseAction) or isinstance(value, bool):
            if value is True:
                args.append(f"--{name}")
            elif value not in (False, None):
                raise ValueError(f"openrlhf.{name}: a switch takes true or false, got {value!r}")
        elif value is None:
            continue
        elif isinstance(value, list):
            args += [f"--{name}", *(str(v) for v in value)]
        else:
            args += [f"--{name}", str(value)]
    return args


def check_args(args: Sequence[str], path: str | None = None) -> argparse.Namespace:
    """Parse a rendered command line with OpenRLHF's parser; ValueError names what it rejects."""
    return build_parser(path).parse_args(list(args))


def _validation_statements(tree: ast.Module) -> list[ast.stmt]:
    """The `__main__` block after `parse_args()`: OpenRLHF's nesting of the flags and its checks,
    without the final `train(args)` and the optional ModelScope patch (which imports more)."""
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            after = [i for i, stmt in enumerate(node.body) if "parse_args" in ast.unparse(stmt)]
            body = node.body[after[0] + 1 :] if after else []
            return [s for s in body if "train(args)" not in ast.unparse(s) and "use_ms" not in ast.unparse(s)]
    raise RuntimeError("train_ppo_ray: no __main__ block found (OpenRLHF changed its layout)")


def _standalone_imports(statements: list[ast.stmt], namespace: dict[str, Any]) -> list[ast.stmt]:
    """`statements` less each `from openrlhf.X import name` whose module imports only the standard library:
    that module is run from its own file (without its package's `__init__`, which imports torch and
    transformers, 4 of a dry run's 6 s here) and the names bound in `namespace`. Others stay as written."""
    package = _source_path().parent.parent
    kept = []
    for stmt in statements:
        file = None
        if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and (stmt.module or "").startswith("openrlhf."):
            file = package.parent.joinpath(*stmt.module.split(".")).with_suffix(".py")
        if file is None or not file.is_file():
            kept.append(stmt)
            continue
        tree = ast.parse(file.read_text(encoding="utf-8"))
        imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        if any(n.level or not all(_stdlib(m) for m in _imported(n)) for n in imports):
            kept.append(stmt)
            continue
        module: dict[str, Any] = {"__name__": f"_openrlhf_standalone.{stmt.module}", "__file__": str(file)}
        exec(compile(tree, str(file), "exec"), module)  # noqa: S102 - OpenRLHF's own module, run as it is
        for alias in stmt.names:
            namespace[alias.asname or alias.name] = module[alias.name]
    return kept


def validated_args(args: Sequence[str], path: str | None = None) -> Any:
    """The rendered flags parsed, nested (`args.rollout.batch_size`) and checked by OpenRLHF's own
    code after its parser: the assertions train_ppo_ray makes before it starts Ray. ValueError names
    the failed check."""
    parsed = check_args(args, path)
    source = Path(path) if path else _source_path()
    namespace: dict[str, Any] = {"args": parsed}
    with AST_LOCK:
        tree = ast.parse(source.read_text(encoding="utf-8"))
        statements = _standalone_imports(_validation_statements(tree), namespace)
        code = compile(ast.Module(body=statements, type_ignores=[]), str(source), "exec")
    try:
        exec(code, namespace)  # noqa: S102
    except AssertionError as e:
        raise ValueError(f"OpenRLHF {VERSION} refuses these flags: {e}") from None
    return namespace["args"]
