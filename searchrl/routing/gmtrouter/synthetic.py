"""Synthetic users with known, differing preferences, so that personalisation can be measured.

Each user belongs to a persona; a user's utility for a model on a query is the persona's taste in
models plus the model's skill on the query's topic, plus the user's own small deviations.
A session is one question put to two or three models picked uniformly (an unbiased logging policy),
sometimes followed by a second question on the same topic put to the same models (a multi-turn
session, what the temporal edges link), each answer rated with noise. Knowing the topic alone (a
non-personalised router) or the overall best-rated model (popularity) is therefore wrong for many
users; inferring the persona from a user's few past ratings is what wins.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from searchrl.routing.gmtrouter.data import Interaction, UserLog

MODELS = ["atlas", "bolt", "cedar", "delta", "ember"]

# Topic -> (templates, fillers): small on purpose, so a few hundred distinct queries cover them all.
TOPICS: dict[str, tuple[list[str], list[str]]] = {
    "math": (
        ["Solve {} for x", "What is the derivative of {}?", "Integrate {} from 0 to 1", "Factor the polynomial {}"],
        ["x^2 - 5x + 6", "3x + 7 = 22", "sin(x) * x", "x^3 - 1", "e^(2x)", "ln(x) / x"],
    ),
    "code": (
        ["Write a Python function that {}", "Why does my code fail when it {}?", "Refactor a loop that {}"],
        [
            "reverses a linked list",
            "parses a CSV file",
            "merges two sorted arrays",
            "reads JSON from a socket",
            "sorts a dictionary by value",
            "retries an HTTP request",
        ],
    ),
    "history": (
        ["When did {} happen?", "What caused {}?", "Who led {}?"],
        [
            "the fall of the Berlin Wall",
            "the French Revolution",
            "the Meiji Restoration",
            "the Battle of Hastings",
            "the Cuban Missile Crisis",
            "the collapse of the Roman Republic",
        ],
    ),
    "cooking": (
        ["How do I make {}?", "What can I use instead of {} in a recipe?", "How long should I cook {}?"],
        ["sourdough bread", "butter", "a medium-rare steak", "risotto", "eggs for baking", "basmati rice"],
    ),
    "health": (
        ["What are the symptoms of {}?", "Is it safe to exercise with {}?", "How is {} usually treated?"],
        ["iron deficiency", "a sprained ankle", "seasonal allergies", "a mild fever", "lower back pain", "migraine"],
    ),
    "travel": (
        ["What should I pack for {}?", "What is the best season to visit {}?", "How do I get around {}?"],
        ["Iceland in winter", "Kyoto", "a hiking trip in Patagonia", "Lisbon", "a safari in Kenya", "New York"],
    ),
}


def topic_queries() -> dict[str, list[str]]:
    return {t: [tpl.format(f) for tpl in tpls for f in fills] for t, (tpls, fills) in TOPICS.items()}


def persona_utilities(rng: np.random.Generator, personas: int) -> np.ndarray:
    """(personas, topics, models) utilities: a persona's taste in models (each persona favours another
    model) plus each model's skill per topic, shared by everyone. The topic skills are what a
    non-personalised router can learn; the taste is what only a user's own ratings reveal."""
    n_topics, n_models = len(TOPICS), len(MODELS)
    taste = rng.normal(0.0, 0.5, size=(personas, n_models))
    taste[np.arange(personas), np.arange(personas) % n_models] += 1.5
    skill = rng.normal(0.0, 0.8, size=(n_topics, n_models))
    return taste[:, None, :] + skill[None, :, :]


def synthesize(
    users: int,
    seed: int = 0,
    personas: int = 4,
    sessions_per_user: tuple[int, int] = (8, 14),
    feedback_noise: float = 0.1,
    user_noise: float = 0.3,
    followup_rate: float = 0.3,
) -> list[UserLog]:
    rng = np.random.default_rng(seed)
    util = persona_utilities(rng, personas)
    queries = topic_queries()
    topics = list(queries)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    out: list[UserLog] = []
    for u in range(users):
        persona = int(rng.integers(personas))
        mine = util[persona] + rng.normal(0.0, user_noise, size=util[persona].shape)
        t = start + timedelta(days=float(rng.uniform(0, 30)))
        inters: list[Interaction] = []
        for _ in range(int(rng.integers(sessions_per_user[0], sessions_per_user[1] + 1))):
            ti = int(rng.integers(len(topics)))
            asked = rng.choice(len(MODELS), size=int(rng.integers(2, 4)), replace=False)
            turns = 2 if rng.random() < followup_rate else 1
            for query in rng.choice(queries[topics[ti]], size=turns, replace=False):
                for m in asked:
                    rating = 1.0 / (1.0 + np.exp(-2.0 * (mine[ti, m] - 0.5))) + rng.normal(0.0, feedback_noise)
                    inters.append(
                        Interaction(
                            query=str(query),
                            model_used=MODELS[int(m)],
                            user_feedback=round(float(np.clip(rating, 0.0, 1.0)), 3),
                            timestamp=t,
                        )
                    )
                    t += timedelta(minutes=float(rng.uniform(0.5, 3)))
            t += timedelta(hours=float(rng.uniform(2, 48)))
        # Half the users state a favourite: the model best for them on average over topics.
        stated = [MODELS[int(np.argmax(mine.mean(axis=0)))]] if rng.random() < 0.5 else []
        out.append(
            UserLog(
                user_id=f"user{u:05d}",
                interactions=inters,
                preferred_models=stated,
                context={"synthetic": True, "persona": persona, "seed": seed},
            )
        )
    return out
