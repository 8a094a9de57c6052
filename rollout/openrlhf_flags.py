"""The flags of OpenRLHF's `train_ppo_ray` parser, read from its source with `ast`.

Importing the module would pull in Ray, DeepSpeed and vLLM; reading the `add_argument` calls keeps
the check available on a CPU machine with `openrlhf` installed without its dependencies.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

MODULE = "openrlhf.cli.train_ppo_ray"


def _source_path() -> Path:
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("openrlhf is not installed: pip install --no-deps openrlhf==0.11.2")
    return Path(next(iter(spec.submodule_search_locations))) / "cli" / "train_ppo_ray.py"


def _loop_bindings(tree: ast.AST) -> dict[ast.AST, tuple[str, list[str]]]:
    """For-loops over a literal tuple of strings, e.g. `for prefix in ("actor", "critic")`."""
    bindings = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.For)
            and isinstance(node.target, ast.Name)
            and isinstance(node.iter, ast.Tuple | ast.List)
        ):
            values = [e.value for e in node.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            for child in ast.walk(node):
                bindings[child] = (node.target.id, values)
    return bindings


def _names(arg: ast.expr, binding: tuple[str, list[str]] | None) -> list[str]:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.JoinedStr) and binding is not None:
        var, values = binding
        out = []
        for value in values:
            parts = []
            for piece in arg.values:
                if isinstance(piece, ast.Constant):
                    parts.append(str(piece.value))
                elif (
                    isinstance(piece, ast.FormattedValue)
                    and isinstance(piece.value, ast.Name)
                    and piece.value.id == var
                ):
                    parts.append(value)
                else:
                    return []
            out.append("".join(parts))
        return out
    return []


@cache
def parser_flags(path: str | None = None) -> dict[str, dict[str, Any]]:
    """Flag name (without `--`) -> {"store_true": bool}, for every option of the parser."""
    source = Path(path) if path else _source_path()
    tree = ast.parse(source.read_text(encoding="utf-8"))
    bindings = _loop_bindings(tree)
    flags: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
        ):
            continue
        action = next(
            (k.value.value for k in node.keywords if k.arg == "action" and isinstance(k.value, ast.Constant)), None
        )
        for arg in node.args:
            for name in _names(arg, bindings.get(node)):
                if name.startswith("--"):
                    flags[name[2:]] = {"store_true": action == "store_true", "store_false": action == "store_false"}
    return flags


def unknown_flags(names: Iterable[str], path: str | None = None) -> list[str]:
    known = parser_flags(path)
    return [n for n in names if n not in known]


def render_flags(values: Mapping[str, Any], path: str | None = None) -> list[str]:
    """`--name value` arguments for the given flags; booleans become bare switches (or are left out)."""
    bad = unknown_flags(values, path)
    if bad:
        raise ValueError(f"not flags of OpenRLHF's train_ppo_ray: {', '.join(bad)}")
    known = parser_flags(path)
    args: list[str] = []
    for name, value in values.items():
        if known[name]["store_true"] or isinstance(value, bool):
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
