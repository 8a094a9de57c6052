"""Answer metrics with R1-Searcher's definitions: normalisation, EM, token F1, cover-EM.

These reproduce R1-Searcher's evaluation script figure for figure (tests check it on the released
trajectories), so numbers from this project and from the paper are comparable.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache

_PUNCTUATION = frozenset(string.punctuation + "\u2018\u2019\u00b4`")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# Golds that are judgements rather than spans of text; F1 and the process reward treat them apart.
YES_NO = ("yes", "no", "noanswer")


def _bool_mapping(s: str) -> str:
    return {"True": "yes", "False": "no"}.get(s, s)


_PUNCTUATION_TO_SPACE = str.maketrans(dict.fromkeys(_PUNCTUATION, " "))
# Golds and short answers repeat across the samples of a group and across steps, so they are cached;
# longer texts are normalised each time, which bounds the cache (32,768 entries of at most 128
# characters, under 40 MB) whatever predictions the policy writes.
_CACHED_CHARS = 128


def _normalize(s: str) -> str:
    s = _bool_mapping(s).replace("_", " ").lower().translate(_PUNCTUATION_TO_SPACE)
    return " ".join(_ARTICLES.sub(" ", s).split())


_normalize_cached = lru_cache(maxsize=32768)(_normalize)


def normalize_answer(s: str) -> str:
    """Lower-case, `_` to space, punctuation to space, drop a/an/the, collapse white space."""
    return _normalize_cached(s) if len(s) <= _CACHED_CHARS else _normalize(s)


def exact_match(prediction: str, gold: str) -> float:
    return _em(normalize_answer(prediction), normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    """Token F1; 0 when either side is yes/no/noanswer and the two differ."""
    return _f1(normalize_answer(prediction), normalize_answer(gold))


def cover_exact_match(prediction: str, gold: str) -> float:
    """1 when every gold token appears among the prediction's tokens (order ignored)."""
    return _cem(normalize_answer(prediction), normalize_answer(gold))


# The same three metrics over already normalised strings, so all_metrics normalises each text once.
def _em(pred: str, ref: str) -> float:
    return float(pred == ref)


def _f1(pred: str, ref: str) -> float:
    if (pred in YES_NO or ref in YES_NO) and pred != ref:
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    # Tokens in common, counted with multiplicity (the size of the two Counters' intersection).
    left = Counter(ref_tokens) if len(ref_tokens) > 32 else _counts(ref_tokens)
    same = 0
    for token in pred_tokens:
        if left.get(token, 0) > 0:
            left[token] -= 1
            same += 1
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def _counts(tokens: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for token in tokens:
        counts[token] = counts.get(token, 0) + 1
    return counts


def _cem(pred: str, ref: str) -> float:
    # R1-Searcher splits on a single space, so an empty normalised string is the token "".
    pred_tokens = set(pred.split(" "))
    return float(all(tok in pred_tokens for tok in ref.split(" ")))


METRICS: dict[str, Callable[[str, str], float]] = {"em": exact_match, "f1": f1, "cem": cover_exact_match}
_ON_NORMALISED: dict[str, Callable[[str, str], float]] = {"em": _em, "f1": _f1, "cem": _cem}


def best_over_golds(metric: str, prediction: str, golds: Sequence[str]) -> float:
    """The metric's maximum over the gold answers (0 when there are none)."""
    fn = METRICS[metric]
    return max((fn(prediction, g) for g in golds), default=0.0)


def all_metrics(prediction: str, golds: Sequence[str]) -> dict[str, float]:
    pred = normalize_answer(prediction)
    refs = [normalize_answer(g) for g in golds]
    if pred in refs:  # an exact match scores 1 on all three (token F1 0 for an empty answer)
        return {"em": 1.0, "f1": 1.0 if pred.split() else 0.0, "cem": 1.0}
    if len(refs) == 1:  # the usual case, without the generators (this runs for every scored sample)
        return {"em": 0.0, "f1": _f1(pred, refs[0]), "cem": _cem(pred, refs[0])}
    return {name: max((fn(pred, ref) for ref in refs), default=0.0) for name, fn in _ON_NORMALISED.items()}


class LabelError(TypeError):
    """A label that cannot be read as gold answers. A TypeError, so every caller that already refuses a label
    of the wrong type (the reward server's 422 naming `labels.i`, data preparation) refuses these too."""


class EmptyGoldError(LabelError):
    """A label with no gold answer, or one that normalises to nothing: readable, but it would pay an empty answer."""


def as_golds(label: object, drop_empty: bool = False) -> list[str]:
    """Gold answers from a label: a string, a list of strings, or a JSON-encoded list of strings.

    Read strictly, never guessed: a string shaped like a list (`[...]`) must be a JSON list of strings, and
    a gold that normalises to nothing (`""`, `"A"`, `"The"`, `"!"`) is refused, since an empty answer
    would match it exactly.

    `drop_empty` leaves such golds out instead (data preparation keeps the rest of a published row); a label left
    with none is still refused.

    >>> as_golds('["Paris", "City of Light"]'), as_golds("Paris"), as_golds('["The", "Paris"]', drop_empty=True)
    (['Paris', 'City of Light'], ['Paris'], ['Paris'])
    """
    if isinstance(label, str):
        stripped = label.strip()
        golds = _json_list(stripped) if stripped.startswith("[") and stripped.endswith("]") else [label]
    elif isinstance(label, list | tuple) and all(isinstance(x, str) for x in label):
        golds = list(label)
    else:
        raise TypeError(f"a label must be a string or a list of strings, got {type(label).__name__}")
    if drop_empty:
        golds = [g for g in golds if normalize_answer(g)]
    if not golds:
        raise EmptyGoldError("the label holds no gold answer; give at least one")
    empty = [g for g in golds if not normalize_answer(g)]
    if empty:
        raise EmptyGoldError(
            f"gold answer {empty[0]!r} normalises to nothing (articles, punctuation and space are dropped), "
            "so an empty answer would match it; fix or drop this record"
        )
    return golds


def _json_list(text: str) -> list[str]:
    try:
        decoded = json.loads(text)
    except json.JSONDecodeError:
        raise LabelError(
            f"the label {text[:60]!r} looks like a list but is not JSON; write a JSON list of strings "
            '(["a", "b"], double quotes) or send a list'
        ) from None
    except RecursionError:
        raise LabelError("a label's JSON-encoded list is nested too deep; send a list of strings") from None
    if not isinstance(decoded, list):
        raise LabelError(f"the label {text[:60]!r} looks like a list but decodes to a {type(decoded).__name__}")
    odd = next((i for i, x in enumerate(decoded) if not isinstance(x, str)), None)
    if odd is not None:
        raise LabelError(
            f"the label's JSON list holds {str(decoded[odd])[:40]!r} at position {odd}, of type "
            f"{type(decoded[odd]).__name__}; every gold answer must be a string: quote it"
        )
    return decoded


def squad_normalize(text: str) -> str:
    """SQuAD's answer normalisation, which Search-R1's and Router-R1's rewards use: lower case, punctuation deleted
    (where normalize_answer turns it into spaces), articles dropped, white space collapsed."""
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def squad_em(answer: str, golds: Sequence[str]) -> float:
    """1.0 when the answer equals a gold answer after SQuAD normalisation."""
    return float(squad_normalize(answer) in {squad_normalize(g) for g in golds})
