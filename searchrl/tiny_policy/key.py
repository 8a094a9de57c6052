"""What a warm start is made of, as hashes that follow the data, not the files that make it: the texts its
tokenizer is trained on and every episode of its curriculum in training order (`data`), the recipe (`settings`),
and the functions that turn those into weights (`training`), each read as its syntax tree, so that a comment, a
docstring, a moved file or a renamed module leaves the key as it was while a change to one episode, one setting
or one training statement changes it.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import json
import textwrap
from collections.abc import Callable, Iterable, Iterator
from types import FunctionType, ModuleType
from typing import Any

from searchrl.tiny_policy import build as building
from searchrl.tiny_policy import model, supervise
from searchrl.tiny_policy.curriculum import Recipe, World

# What turns the data into weights and tokenizer: the supervised loop (all of its module), the policy's shape and
# tokenizer, and the build's order of steps. The curriculum's and the retriever's code are not here: what they
# make is hashed as data instead.
TRAINING: tuple[ModuleType | Callable[..., Any], ...] = (
    supervise,
    model.build_policy,
    model.build_tokenizer,
    building.build,
)


def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little") + part)  # length-prefixed: no two lists of parts hash alike
    return h.hexdigest()[:16]


def curriculum(world: World, recipe: Recipe) -> Iterator[str]:
    """Every text a warm start is made from, marked: the tokenizer's texts (`T`), then each step (`S` and its
    phase) and its episodes (`E`), each segment marked trained on (`+`) or not (`-`)."""
    for text in building.tokenizer_texts(world, recipe.seed):
        yield "T" + text
    for phase, episodes in supervise.batches(world, recipe):
        yield f"S{phase}"
        for segments in episodes:
            yield "E"
            for text, trained in segments:
                yield ("+" if trained else "-") + text


def data_hash(world: World, recipe: Recipe) -> str:
    """The curriculum's texts in order, each marked as `curriculum` writes it."""
    return _digest(part.encode() for part in curriculum(world, recipe))


def settings_hash(recipe: Recipe) -> str:
    return _digest([json.dumps(dataclasses.asdict(recipe), sort_keys=True).encode()])


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first.value, "value", None), str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def code_shape(source: str) -> str:
    """Source as its syntax tree, without positions, comments or docstrings."""
    return ast.dump(_without_docstrings(ast.parse(textwrap.dedent(source))), include_attributes=False)


def _globals_read(obj: ModuleType | Callable[..., Any]) -> dict[str, str]:
    """The plain values (strings, numbers, tuples, dicts) a function reads from its module, such as the policy's
    shape and vocabulary size: a change to one changes what is built."""
    functions = [obj] if isinstance(obj, FunctionType) else [
        f for f in vars(obj).values() if isinstance(f, FunctionType) and f.__module__ == obj.__name__
    ]  # fmt: skip
    names: set[str] = set()
    for f in functions:
        codes = [f.__code__]
        while codes:
            code = codes.pop()
            names.update(code.co_names)
            codes += [c for c in code.co_consts if hasattr(c, "co_names")]
    plain = (str, int, float, bool, tuple, frozenset, dict, list)
    return {
        name: repr(value)
        for f in functions
        for name, value in vars(inspect.getmodule(f)).items()
        if name in names and isinstance(value, plain)
    }


def training_hash(training: Iterable[ModuleType | Callable[..., Any]] = TRAINING) -> str:
    return _digest(
        (code_shape(inspect.getsource(obj)) + json.dumps(_globals_read(obj), sort_keys=True)).encode()
        for obj in training
    )
