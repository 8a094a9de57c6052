"""The reward specification: which components count and with what explicit weight, plus presets.

reward = answer_weight * answer_metric + answer_bias          (answer term, bias only with no answer)
       + search_weight * [search well formed]                  (stage 1)
       + format_weight * [no violation among format_rules]     (stage 1)
       - violation_penalty * [any violation among penalty_rules] (stage 2)
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rollout.format_rules import RULES

# The format bonus covers every rule but the query/documents tag counts, which the search bonus
# covers; forged documents void both, as the worst way to game stage 1.
FORMAT_RULES = tuple(name for name in RULES if name != "tag_counts")


class RewardSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    answer_metric: Literal["em", "f1", "cem"] = "em"
    answer_weight: float = 1.0
    answer_bias: float = Field(0.0, description="added to the answer term whether or not the answer is right")
    search_weight: float = 0.0
    format_weight: float = 0.0
    format_rules: tuple[str, ...] = Field(FORMAT_RULES, description="rules that must hold for the format bonus")
    violation_penalty: float = Field(2.0, ge=0)
    penalty_rules: tuple[str, ...] = Field(tuple(RULES), description="rules whose violation costs the penalty")
    max_answer_words: int = Field(10, ge=1)
    check_cjk: bool = True

    @field_validator("format_rules", "penalty_rules")
    @classmethod
    def _known_rules(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [n for n in names if n not in RULES]
        if unknown:
            raise ValueError(f"unknown rule(s) {unknown}; known rules: {sorted(RULES)}")
        return names

    def bounds(self) -> tuple[float, float]:
        """The lowest and highest reward this spec can give."""
        answer = sorted((self.answer_bias, self.answer_weight + self.answer_bias))
        bonuses = [self.search_weight, self.format_weight]
        low = answer[0] + sum(min(0.0, w) for w in bonuses) - (self.violation_penalty if self.penalty_rules else 0.0)
        high = answer[1] + sum(max(0.0, w) for w in bonuses)
        return low, high


STAGE1_FORMAT = RewardSpec(answer_weight=0.0, search_weight=0.5, format_weight=0.5, violation_penalty=0.0)
STAGE2_ANSWER = RewardSpec(answer_metric="em", violation_penalty=2.0)

# Presets reproduce R1-Searcher's reward servers exactly, for side-by-side comparison runs.
PRESETS: dict[str, RewardSpec] = {
    "stage1-format": STAGE1_FORMAT,
    "stage2-answer": STAGE2_ANSWER,
    # train/reward_server_qwen_zero.py: F1, minus 2 on any format violation.
    "r1searcher-qwen-stage2": RewardSpec(answer_metric="f1", violation_penalty=2.0),
    # train/reward_server_llama_stage1.py: cover-EM as +1/-1, +0.5 for searching, +0.5 for think/answer.
    "r1searcher-llama-stage1": RewardSpec(
        answer_metric="cem",
        answer_weight=2.0,
        answer_bias=-1.0,
        search_weight=0.5,
        format_weight=0.5,
        format_rules=("think", "answer_count"),
        violation_penalty=0.0,
        penalty_rules=(),
    ),
}
