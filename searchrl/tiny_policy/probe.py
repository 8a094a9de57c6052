"""Does a policy copy? Sampled on held-out fictional people, outside any training loop: the first segment
(up to its query or EOS); for each search, the continuation after the asked person's own passages and, as
the reading check, after another held-out person's passages (who was born elsewhere). Rates are per search.

- `names_rate`: the query names the person (a whole word), so a real index would return their passages;
- `doc_city`: with their passages shown, the answer is the city those passages name;
- `swapped_shown_city`: with another person's passages shown, the answer is the city *those* name (reading);
- `swapped_gold`: with another person's passages shown, the answer is the asked person's city anyway
  (recall or luck: chance is about 1/20 of the answers);
- `top_city_share`: the most frequent city's share of the answers (a prior over cities shows up here).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

from searchrl.tiny_policy.mixture import Question
from searchrl.tiny_policy.writing import WRITINGS, Writing

EOS = "</s>"


def _generate(model: Any, tokenizer: Any, texts: list[str], max_new: int) -> list[str]:
    import torch

    tokenizer.padding_side = "left"
    enc = tokenizer(texts, add_special_tokens=False, return_tensors="pt", padding=True).to(model.device)
    with torch.no_grad():
        out = model.generate(
            **enc, max_new_tokens=max_new, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        )  # fmt: skip
    texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=False)
    return [t.replace(tokenizer.pad_token, "") for t in texts]


def first_segment(text: str, search_close: str = WRITINGS["r1-searcher"].SEARCH_CLOSE) -> str:
    """A generated segment as the environment keeps it: up to the end of its first query (with the newlines
    a merged token put after it), or up to EOS."""
    end, stop = text.find(search_close), text.find(EOS)
    if end >= 0 and (stop < 0 or end < stop):
        end += len(search_close)
        return text[: end + len(text[end:]) - len(text[end:].lstrip("\n"))]
    return text if stop < 0 else text[:stop]


def probe(
    model: Any,
    tokenizer: Any,
    template: str,
    people: Sequence[tuple[Question, Sequence[str]]],
    samples: int = 4,
    seed: int = 1234,
    chunk: int = 200,
    writing: Writing = WRITINGS["r1-searcher"],
) -> dict[str, Any]:
    """`people`: held-out questions with their own passages (texts as the environment shows them); `writing`: the
    protocol the policy speaks."""
    import torch

    rng = random.Random(seed)
    torch.manual_seed(seed)
    model.eval()
    episodes = [p for p in people for _ in range(samples)]
    n = searched = names = doc_city = shown = gold = 0
    cities: Counter[str] = Counter()
    examples: list[dict[str, Any]] = []
    for start in range(0, len(episodes), chunk):
        part = episodes[start : start + chunk]
        prompts = [template.replace("{question}", q.question) for q, _ in part]
        firsts = [first_segment(t, writing.SEARCH_CLOSE) for t in _generate(model, tokenizer, prompts, 40)]
        right, swapped, meta = [], [], []
        for (q, docs), prompt, seg in zip(part, prompts, firsts, strict=True):
            n += 1
            query = writing.query(seg)
            if query is None:
                continue
            searched += 1
            named = q.query.lower() in query.lower().split()
            names += named
            other_q, other_docs = rng.choice([o for o in people if o[0].answer != q.answer])
            mine, theirs = rng.sample(list(docs), len(docs)), rng.sample(list(other_docs), len(other_docs))
            right.append(prompt + seg + writing.documents(mine, after=seg))
            swapped.append(prompt + seg + writing.documents(theirs, after=seg))
            meta.append((q, other_q, query))
        if not meta:
            continue
        for (q, other_q, query), a, b in zip(
            meta, _generate(model, tokenizer, right, 32), _generate(model, tokenizer, swapped, 32), strict=True
        ):
            a_right, a_swapped = writing.answer(a.split(EOS)[0]), writing.answer(b.split(EOS)[0])
            doc_city += a_right == q.answer
            shown += a_swapped == other_q.answer
            gold += a_swapped == q.answer
            if a_right is not None:
                cities[a_right] += 1
            if len(examples) < 5:
                examples.append({"person": q.query, "query": query, "answer": a_right, "city": q.answer})
    per = max(searched, 1)
    return {
        "episodes": n,
        "search_rate": searched / max(n, 1),
        "names_rate": names / per,
        "doc_city": doc_city / per,
        "swapped_shown_city": shown / per,
        "swapped_gold": gold / per,
        "top_city_share": max(cities.values()) / sum(cities.values()) if cities else None,
        "examples": examples,
    }
