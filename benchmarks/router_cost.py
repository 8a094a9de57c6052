"""Router-R1's cost reward against the cost penalty this project had, on a simulated routing problem.

    python -m benchmarks.router_cost [--steps 200] [--seeds 0,1,2] [--out benchmarks/results/router_cost.json]

A policy answers questions of three difficulties; per difficulty it picks one action: answer alone, or ask
one of Router-R1's six pool models first (its prices; a reply of 100-200 completion tokens). Whether the
answer is right is drawn from the action's accuracy on that difficulty (stronger models higher, all of them
low on hard questions). The policy (softmax logits per difficulty) is trained by REINFORCE with a group
baseline (8 samples per question, 16 questions a step) on one of two rewards:

  router_r1  0 when wrong; (1 - c) + c * cost_reward when right (searchrl/reward/router_r1.py, over the last
             1,000 episodes, every episode entering the window)
  penalty    EM - w * cost / largest cost of the last 256 episodes, on every episode (the former reward)

and is then scored by its expected accuracy and cost per question (overall, and how often it still asks on
hard questions). The figures are a simulation's: they compare how the two rewards steer a policy, not models.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
from collections import deque
from pathlib import Path

import numpy as np

from searchrl.paths import ROOT
from searchrl.reward.router_r1 import cost_reward

# Router-R1's pool, $ per 1M completion tokens (its route_service.py).
PRICES = {"llama-8b": 0.18, "mistral-7b": 0.2, "qwen-7b": 0.3, "gemma-27b": 0.8, "llama-70b": 0.88, "mixtral": 1.2}
ACTIONS = ["alone", *PRICES]
# P(right) by difficulty (easy, medium, hard) for each action.
ACCURACY = {
    "alone": (0.35, 0.10, 0.02),
    "llama-8b": (0.70, 0.35, 0.10),
    "mistral-7b": (0.65, 0.30, 0.08),
    "qwen-7b": (0.75, 0.40, 0.12),
    "gemma-27b": (0.80, 0.50, 0.20),
    "llama-70b": (0.90, 0.65, 0.30),
    "mixtral": (0.90, 0.70, 0.35),
}
DIFFICULTIES = ("easy", "medium", "hard")


class RouterR1Reward:
    def __init__(self, c: float) -> None:
        self.c = c
        self.recent: deque[float] = deque(maxlen=1000)

    def __call__(self, right: bool, cost: float) -> float:
        self.recent.append(math.sqrt(cost))
        normalised = cost_reward(self.recent)
        return (1 - self.c) + self.c * normalised if right else 0.0


class CostPenalty:
    def __init__(self, w: float) -> None:
        self.w = w
        self.recent: deque[float] = deque(maxlen=256)

    def __call__(self, right: bool, cost: float) -> float:
        self.recent.append(cost)
        top = max(self.recent)
        return float(right) - (self.w * cost / top if top > 0 else 0.0)


def cost_of(action: str, rng: np.random.Generator) -> float:
    return 0.0 if action == "alone" else PRICES[action] * float(rng.integers(100, 201)) / 1e6


def train(reward, steps: int, seed: int, lr: float = 5.0, group: int = 8, questions: int = 16) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = np.zeros((len(DIFFICULTIES), len(ACTIONS)))
    for _ in range(steps):
        grad = np.zeros_like(logits)
        for _ in range(questions):
            d = int(rng.integers(len(DIFFICULTIES)))
            probs = np.exp(logits[d] - logits[d].max())
            probs /= probs.sum()
            picks = rng.choice(len(ACTIONS), size=group, p=probs)
            rewards = np.array(
                [reward(rng.random() < ACCURACY[ACTIONS[a]][d], cost_of(ACTIONS[a], rng)) for a in picks]
            )
            advantages = rewards - rewards.mean()
            for a, adv in zip(picks, advantages, strict=True):
                grad[d] += adv * (np.eye(len(ACTIONS))[a] - probs)
        logits += lr * grad / (questions * group)
    return logits


def evaluate(logits: np.ndarray) -> dict[str, float]:
    """Expected accuracy and cost per question ($ per 1,000 questions) of the policy, and how often it asks."""
    acc = cost = 0.0
    asks = {}
    for d, name in enumerate(DIFFICULTIES):
        probs = np.exp(logits[d] - logits[d].max())
        probs /= probs.sum()
        acc += sum(p * ACCURACY[a][d] for p, a in zip(probs, ACTIONS, strict=True)) / len(DIFFICULTIES)
        cost += sum(p * (PRICES.get(a, 0.0) * 150 / 1e6) for p, a in zip(probs, ACTIONS, strict=True))
        asks[name] = float(1 - probs[0])
    return {
        "accuracy": acc,
        "cost_per_1k_questions": 1000 * cost / len(DIFFICULTIES),
        **{f"asks_{k}": v for k, v in asks.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.router_cost", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "router_cost.json")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = [("router_r1", c) for c in (0.0, 0.3, 0.6, 0.9, 1.0)] + [("penalty", w) for w in (0.25, 0.5, 1.0, 2.0)]
    rows = []
    for kind, weight in settings:
        runs = []
        for seed in seeds:
            reward = RouterR1Reward(weight) if kind == "router_r1" else CostPenalty(weight)
            runs.append(evaluate(train(reward, args.steps, seed)))
        row = {"reward": kind, "weight": weight, **{k: float(np.mean([r[k] for r in runs])) for k in runs[0]}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    # A penalty setting is dominated when some router_r1 setting is at least as accurate and at most as dear.
    for row in rows:
        if row["reward"] == "penalty":
            row["dominated_by"] = [
                r["weight"]
                for r in rows
                if r["reward"] == "router_r1"
                and r["accuracy"] >= row["accuracy"]
                and r["cost_per_1k_questions"] <= row["cost_per_1k_questions"]
            ]
    result = {
        "date": dt.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "settings": {"steps": args.steps, "seeds": seeds, "group": 8, "questions_per_step": 16, "lr": 5.0},
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
