"""The reward specification, the one `reward:` section of a stage config: every component with its weight.

formula: searchrl (the default)
reward = answer_weight * answer_metric + answer_bias             (stage 2; the bias is added either way)
       + search_weight * [searched, blocks well formed]          (stage 1)
       + format_weight * [no violation among format_rules]       (stage 1)
       - violation_penalty * [any violation among penalty_rules] (stage 2)
       + process_weight * (best reward - reward) * [a search found a gold, no violation]   (agent)
       + efficiency_weight * [fewer searches among correct, well-formed samples]          (agent, per group)

formula: router_r1 (Router-R1's reward, searchrl/reward/router_r1.py)
reward = -1 on a format violation; 0 when wrong; when right: (1 - cost_weight) * answer_metric
       + cost_weight * cost_reward over the last cost_window episodes      (agent, per engine process)
         or, cost_shape: penalty, answer_metric - cost_weight * cost / largest recent cost on every episode

The functions are in searchrl/reward/components.py and router_r1.py; the reward server applies the sample-level
terms (scoring.py), the agent the rest (group.py, and the environment's step reward).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from searchrl.config import ConfigError, apply_override, load, parse_overrides, validate
from searchrl.protocols import DEFAULT_PROTOCOL, PROTOCOLS, ProtocolName
from searchrl.reward.format_rules import RULES

# The format bonus covers every rule but the query/documents tag counts, which the search bonus
# covers; forged documents void both, as the worst way to game stage 1.
FORMAT_RULES = tuple(name for name in RULES if name != "tag_counts")


class RewardSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    formula: Literal["searchrl", "router_r1", "search_r1_em", "search_r1_em_format"] = Field(
        "searchrl",
        description="searchrl: the weighted components below; router_r1: Router-R1's reward; search_r1_em, "
        "search_r1_em_format: Search-R1's qa_em and v0.3 qa_em_format rewards on the whole decoded sequence",
    )
    protocol: ProtocolName | None = Field(
        None,
        description="the tag protocol the reward reads, the stage's `protocol:`; unset: its formula's own (searchrl "
        "and router_r1: r1-searcher; search_r1_*: search-r1)",
    )
    allow_cover_em: bool = Field(False, description="let answer_metric be cem (only to reproduce R1-Searcher)")
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
    role_leakage_scope: Literal["policy", "solution"] = Field(
        "policy", description="role_leakage reads the policy's own text, or the whole solution with its documents"
    )
    process_weight: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="share of the gap to the best reward paid when a search found a gold answer (Agent-R1's idea)",
    )
    efficiency_weight: float = Field(
        0.0, ge=0, description="bonus for fewer searches among a group's correct samples (R1-Searcher++); 0 = off"
    )
    efficiency_group_size: int | None = Field(None, ge=2, description="default: openrlhf.rollout.n_samples_per_prompt")
    efficiency_timeout_s: float = Field(300.0, gt=0, description="longest wait for the rest of a group")
    cost_weight: float = Field(
        0.0,
        ge=0,
        le=1,
        description="formula router_r1: Router-R1's cost coefficient c, a right answer earns "
        "(1 - c) * metric + c * cost_reward; 0 = off",
    )
    cost_window: int = Field(1000, ge=1, description="recent episodes the cost reward is normalised over")
    cost_shape: Literal["router_r1", "penalty"] = Field(
        "router_r1",
        description="router_r1: Router-R1's cost reward on right answers; penalty: minus cost_weight x cost / "
        "largest recent cost on every episode (measured in benchmarks/router_cost.py)",
    )

    # Search-R1's own names and defaults (its compute_score_em arguments): formulas search_r1_em* only.
    format_score: float = Field(0.0, description="search_r1_em*: paid for an extracted answer that is wrong")
    structure_format_score: float = Field(0.0, description="search_r1_em_format: paid when the v0.3 format holds")
    final_format_score: float = Field(0.0, description="search_r1_em_format: a wrong answer outside the format")
    retrieval_score: float = Field(0.0, description="search_r1_em_format: added when a document holds a gold")

    @field_validator("answer_metric")
    @classmethod
    def _cover_em_is_for_evaluation(cls, metric: str, info: ValidationInfo) -> str:
        # Cover-EM pays any answer holding every gold word: "Paris, Lyon or Nice" scores 1 for Paris.
        if metric == "cem" and not info.data.get("allow_cover_em"):
            raise ValueError(
                "cem (cover-EM) pays a list of candidates as much as the answer, since it only asks that every "
                "gold word appear; it is R1-Searcher's evaluation metric (ACC_R), not a training reward. Train on "
                "em or f1; allow_cover_em: true reproduces R1-Searcher's llama stage-1 reward, which has this "
                "weakness (preset r1searcher-llama-stage1)"
            )
        return metric

    @field_validator("format_rules", "penalty_rules")
    @classmethod
    def _known_rules(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [n for n in names if n not in RULES]
        if unknown:
            raise ValueError(f"unknown rule(s) {unknown}; known rules: {sorted(RULES)}")
        return names

    @model_validator(mode="after")
    def _formula_keys(self) -> RewardSpec:
        fields = type(self).model_fields

        def changed(keys: tuple[str, ...]) -> list[str]:
            return [k for k in keys if getattr(self, k) != fields[k].get_default(call_default_factory=True)]

        if unused := changed(SEARCH_R1_ONLY) if not self.search_r1 else []:
            raise ValueError(
                f"{', '.join(unused)}: Search-R1's reward scores only; set `formula: search_r1_em_format`"
            )
        if self.formula == "searchrl":
            if self.cost_weight > 0 or self.cost_shape != "router_r1":
                raise ValueError(
                    "cost_weight, cost_shape: the cost terms are the routing stage's; set `formula: router_r1`"
                )
            return self
        if self.search_r1:
            unused = changed((*SEARCHRL_ONLY, "answer_metric", "cost_weight", "cost_shape"))
            if self.formula == "search_r1_em":
                unused += changed(("structure_format_score", "final_format_score", "retrieval_score"))
            if unused:
                raise ValueError(f"{', '.join(unused)}: not used by formula {self.formula} (Search-R1's own reward)")
            return self
        if self.answer_metric == "cem":
            raise ValueError("answer_metric: formula router_r1 takes em or f1, as Router-R1's reward_metric")
        if unused := changed(SEARCHRL_ONLY):
            raise ValueError(f"{', '.join(unused)}: not used by formula router_r1 (a violation gives -1 there)")
        return self

    @property
    def search_r1(self) -> bool:
        """Search-R1's rewards: they read the whole decoded sequence, prompt included, in Search-R1's tags."""
        return self.formula in SEARCH_R1_FORMULAS

    @property
    def reads(self) -> str:
        """The tag protocol this reward reads (a name of searchrl.protocols.PROTOCOLS)."""
        return self.protocol or protocol_of(self.formula)

    @model_validator(mode="after")
    def _protocol_read(self) -> RewardSpec:
        if self.protocol is not None and self.protocol not in protocols_of(self.formula):
            *others, last = protocols_of(self.formula)
            reads = f"{', '.join(others)} or {last}" if others else last
            raise ValueError(f"protocol: formula {self.formula} reads {reads}'s tags, not {self.protocol}'s")
        return self

    @model_serializer(mode="wrap")
    def _without_unset_protocol(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Unset, the protocol is the formula's own: left out, so a spec's digest is what it was before the key.
        data = handler(self)
        if data.get("protocol") is None:
            data.pop("protocol", None)
        return data

    def weights(self) -> dict[str, float]:
        """Every component by name with its weight (the violation penalty counts negative)."""
        if self.formula == "router_r1":
            return {"answer": 1.0 - self.cost_weight, "violation": -1.0, "cost": self.cost_weight}
        if self.search_r1:
            return {
                "answer": 1.0,
                "format": self.format_score,
                "structure_format": self.structure_format_score,
                "final_format": self.final_format_score,
                "retrieval": self.retrieval_score,
            }
        return {
            "answer": self.answer_weight,
            "search": self.search_weight,
            "format": self.format_weight,
            "violation": -self.violation_penalty,
            "process": self.process_weight,
            "efficiency": self.efficiency_weight,
        }

    def digest(self) -> str:
        """A short hash of the whole spec: equal digests, equal rewards."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def differing_components(self, other: dict[str, Any]) -> list[str]:
        """The components (or shared settings) whose keys differ between this spec and `other` (a dumped spec)."""
        mine = json.loads(json.dumps(self.model_dump(mode="json")))
        keys = sorted(k for k in set(mine) | set(other) if mine.get(k) != other.get(k))
        return list(dict.fromkeys(COMPONENT_OF_KEY.get(k, k) for k in keys))

    def bounds(self) -> tuple[float, float]:
        """The lowest and highest reward the reward server gives (the agent's group-level terms aside)."""
        if self.formula == "router_r1":
            return -1.0, 1.0 - self.cost_weight if self.cost_shape == "router_r1" else 1.0
        if self.search_r1:
            paid = [0.0, 1.0, self.format_score, 1.0 - self.structure_format_score, self.final_format_score]
            paid.append(self.structure_format_score + max(0.0, self.retrieval_score))
            return min(paid), max(paid)
        answer = sorted((self.answer_bias, self.answer_weight + self.answer_bias))
        bonuses = [self.search_weight, self.format_weight]
        low = answer[0] + sum(min(0.0, w) for w in bonuses) - (self.violation_penalty if self.penalty_rules else 0.0)
        high = answer[1] + sum(max(0.0, w) for w in bonuses)
        return low, high


# Which component each key of the spec belongs to, so a difference names the component.
COMPONENT_OF_KEY = {
    "formula": "formula",
    "answer_metric": "answer",
    "answer_weight": "answer",
    "answer_bias": "answer",
    "search_weight": "search",
    "format_weight": "format",
    "format_rules": "format",
    "violation_penalty": "violation",
    "penalty_rules": "violation",
    "max_answer_words": "format rules (max_answer_words)",
    "check_cjk": "format rules (check_cjk)",
    "role_leakage_scope": "format rules (role_leakage_scope)",
    "allow_cover_em": "answer",
    "process_weight": "process",
    "efficiency_weight": "efficiency",
    "efficiency_group_size": "efficiency",
    "efficiency_timeout_s": "efficiency",
    "cost_weight": "cost",
    "cost_window": "cost",
    "cost_shape": "cost",
    "format_score": "format (Search-R1)",
    "structure_format_score": "format (Search-R1)",
    "final_format_score": "format (Search-R1)",
    "retrieval_score": "retrieval (Search-R1)",
}
SEARCH_R1_FORMULAS = ("search_r1_em", "search_r1_em_format")


def protocols_of(formula: str) -> tuple[str, ...]:
    """The tag protocols a formula can read, in PROTOCOLS' order, so its own comes first: each protocol names the
    formulas that read it (REWARD_FORMULAS). Search-R1's read its tags and RAG-R1's (whose reward is Search-R1's EM);
    Router-R1's reads R1-Searcher's spelling or the original's; the project's own reads every protocol it can parse
    (R1-Searcher's, Search-R1's, the native tool calls)."""
    return tuple(name for name, protocol in PROTOCOLS.items() if formula in protocol.REWARD_FORMULAS) or (
        DEFAULT_PROTOCOL,
    )


def protocol_of(formula: str) -> str:
    """The tag protocol a reward formula was written for."""
    return protocols_of(formula)[0]


SEARCH_R1_ONLY = ("format_score", "structure_format_score", "final_format_score", "retrieval_score")

# The keys formula router_r1 leaves alone: set to anything but their defaults, they would be ignored silently.
SEARCHRL_ONLY = (
    "answer_weight",
    "answer_bias",
    "search_weight",
    "format_weight",
    "format_rules",
    "violation_penalty",
    "penalty_rules",
    "max_answer_words",
    "check_cjk",
    "process_weight",
    "efficiency_weight",
)

STAGE1_FORMAT = RewardSpec(answer_weight=0.0, search_weight=0.5, format_weight=0.5, violation_penalty=0.0)
STAGE2_ANSWER = RewardSpec(answer_metric="em", violation_penalty=2.0)

# Presets reproduce the original reward servers exactly, for side-by-side comparison runs, weaknesses
# included: R1-Searcher's role_leakage reads the retrieved documents too, its llama stage-1 reward pays cover-EM.
PRESETS: dict[str, RewardSpec] = {
    "stage1-format": STAGE1_FORMAT,
    "stage2-answer": STAGE2_ANSWER,
    # Router-R1's train.sh: reward_metric em, cost_coe 0.0 (its main_ppo.py window of 1,000 episodes).
    "router_r1": RewardSpec(formula="router_r1"),
    # Search-R1's rewards, with the values its scripts train with: v0.1-v0.2 (train_ppo.sh, train_grpo.sh) pay EM
    # alone; v0.3 (train_*_format.sh) adds the structure and final format scores, retrieval score 0.
    "search-r1-em": RewardSpec(formula="search_r1_em"),
    "search-r1-em-format": RewardSpec(
        formula="search_r1_em_format", structure_format_score=0.2, final_format_score=0.1, retrieval_score=0.0
    ),
    # train/reward_server_qwen_zero.py: F1, minus 2 on any format violation.
    "r1searcher-qwen-stage2": RewardSpec(answer_metric="f1", violation_penalty=2.0, role_leakage_scope="solution"),
    # train/reward_server_llama_stage1.py: cover-EM as +1/-1, +0.5 for searching, +0.5 for think/answer.
    "r1searcher-llama-stage1": RewardSpec(
        answer_metric="cem",
        allow_cover_em=True,
        role_leakage_scope="solution",
        answer_weight=2.0,
        answer_bias=-1.0,
        search_weight=0.5,
        format_weight=0.5,
        format_rules=("think", "answer_count"),
        violation_penalty=0.0,
        penalty_rules=(),
    ),
}


class RewardSection(BaseModel):
    """A stage config, or its resolved JSON, read for its `reward:` section alone. The stage config's own schema
    holds the same `reward: RewardSpec` field, and both go through `searchrl.config`'s one loader, so the reward
    server and the agent cannot read the section differently."""

    model_config = ConfigDict(extra="ignore")
    reward: RewardSpec


def load_reward_spec(
    config: str | Path | None = None, preset: str | None = None, overrides: Iterable[str] = ()
) -> RewardSpec:
    """The reward spec of a stage config (`reward:` section) or of a named preset, with overrides.

    Overrides may name the spec's keys directly (`answer_metric=f1`) or with the `reward.` prefix.
    """
    if (config is None) == (preset is None):
        raise ConfigError("give exactly one of --config FILE or --preset NAME")
    overrides = [o if o.startswith("reward.") else f"reward.{o}" for o in overrides]
    if config is not None:
        return load(RewardSection, config, overrides).reward
    if preset not in PRESETS:
        raise ConfigError(f"--preset: unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    data: dict[str, Any] = {"reward": PRESETS[preset].model_dump()}
    for key, value in parse_overrides(overrides):
        apply_override(data, key, value)
    return validate(RewardSection, data, f"preset {preset}").reward


def resolved_reward_spec(path: str | Path) -> RewardSpec:
    """The `reward` section of a resolved stage config (the JSON the agent reads)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{p}: cannot read the resolved config: {e}") from None
    except ValueError as e:
        raise ConfigError(f"{p}: not JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping (write it with python -m searchrl.job.resolved_config)")
    return validate(RewardSection, data, str(p)).reward
