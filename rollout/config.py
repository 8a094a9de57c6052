"""YAML configs validated into pydantic models, with `key=value` overrides from the command line.

Errors name the file, the dotted key and what was expected, because a typo found after a GPU job
has started costs hours. OpenRLHF hyper-parameters stay under their own dotted flag names so the
mapping to `train_ppo_ray`'s parser is one-to-one.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from reward_server.spec import RewardSpec
from rollout.stage_prompt import StagePrompt
from search_backend.config import SearchConfig

M = TypeVar("M", bound=BaseModel)
# The resolved stage config for the agent in every vLLM engine process: inline JSON (what a Ray
# submit sets, since env_vars reach every worker) or, for local runs, the path of a JSON file.
CONFIG_JSON_ENV = "SEARCHRL_CONFIG_JSON"
CONFIG_ENV = "SEARCHRL_CONFIG"
FlagValue = bool | int | float | str | list[str] | list[int] | list[float] | None


# The folder holding a stage's agent file and data preparation, where it is not named after the stage.
STAGE_PACKAGES = {"router_r1": "stage_router_r1"}


def stage_package(stage: str) -> str:
    return STAGE_PACKAGES.get(stage, stage)


class ConfigError(ValueError):
    """A config file or override that does not validate; the message names file, key and expectation."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(Strict):
    """A policy model and how its prompts are written. Base models get a plain-text template; chat
    models get a system message rendered through the tokenizer's own chat template."""

    name: str
    kind: Literal["base", "chat"]
    model_path: str
    tokenizer_path: str | None = None
    template: str | None = Field(None, description="base models: the whole prompt, with {question}")
    system: str | None = Field(None, description="chat models: the system message with the search rules")
    user: str = Field("{question}", description="chat models: the user turn, with {question}")
    assistant_prefix: str = Field("<think>", description="chat models: text that opens the assistant turn")

    @model_validator(mode="after")
    def _template_for_kind(self) -> ModelConfig:
        if self.kind == "base":
            if not self.template or "{question}" not in self.template:
                raise ValueError("a base model needs `template` containing {question}")
        elif not self.system:
            raise ValueError("a chat model needs `system` (the search rules as a system message)")
        return self

    @property
    def tokenizer(self) -> str:
        return self.tokenizer_path or self.model_path


class EpisodeConfig(Strict):
    """The search episode: how many passages per search, how many searches, tokens per segment."""

    top_k: int = Field(3, ge=1, le=50)
    max_searches: int = Field(8, ge=0, le=64)
    max_segment_tokens: int = Field(512, ge=1)
    process_reward_weight: float = Field(
        0.0, ge=0, description="per search whose documents contain the gold answer (Agent-R1's idea); 0 = off"
    )
    max_queries_per_block: int = Field(
        1, ge=1, le=16, description="queries one query block may hold, split on query_separator (RAG-R1); 1 = off"
    )
    query_separator: str = Field("||", min_length=1, description="separates the queries of one block")
    efficiency_weight: float = Field(
        0.0, ge=0, description="bonus for fewer searches among a group's correct samples (R1-Searcher++); 0 = off"
    )
    efficiency_group_size: int | None = Field(None, ge=2, description="default: openrlhf.rollout.n_samples_per_prompt")
    efficiency_timeout_s: float = Field(300.0, gt=0, description="longest wait for the rest of a group")
    cost_weight: float = Field(
        0.0, ge=0, description="subtract weight x the episode's search cost, normalised (Router-R1); 0 = off"
    )
    cost_window: int = Field(256, ge=1, description="recent episodes the cost is normalised over")


class RewardServerConfig(Strict):
    """Where the agent sends finished episodes, and how long it keeps trying before the job fails."""

    urls: list[str] = Field(default_factory=lambda: ["http://127.0.0.1:8001"])
    deadline_s: float = Field(300.0, gt=0, description="give up (and fail the job) after this long")
    timeout_s: float = Field(30.0, gt=0)
    token_env: str = "SEARCHRL_REWARD_TOKEN"

    @field_validator("urls", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return [u.strip() for u in value.split(",") if u.strip()] if isinstance(value, str) else value


class StageConfig(Strict):
    stage: Literal["stage1_format", "stage2_answer", "router_r1"]
    model: str = Field(description="path of a configs/models/*.yaml file")
    init_from: str | None = Field(None, description="a stage config whose final checkpoint is the starting policy")
    reward: RewardSpec
    episode: EpisodeConfig = EpisodeConfig()
    search: SearchConfig = SearchConfig()
    reward_server: RewardServerConfig = RewardServerConfig()
    prompt: StagePrompt | None = Field(None, description="the stage's own prompt text, over the model config's")
    openrlhf: dict[str, FlagValue] = Field(default_factory=dict, description="train_ppo_ray flags, without `--`")

    @field_validator("openrlhf")
    @classmethod
    def _flag_names(cls, flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
        for name in flags:
            if name.startswith("-"):
                raise ValueError(f"write the flag `{name}` without the leading dashes")
        return flags


def parse_overrides(items: Iterable[str]) -> list[tuple[str, Any]]:
    """`key=value` pairs; values are read as YAML scalars (16 -> int, true -> bool, 2e-6 -> float)."""
    pairs = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override `{item}`: expected key=value, e.g. reward.answer_metric=f1")
        value = yaml.safe_load(raw) if raw.strip() else ""
        pairs.append((key.strip(), value))
    return pairs


def apply_override(data: dict[str, Any], key: str, value: Any) -> None:
    """Set a dotted key. Inside a mapping whose keys are themselves dotted (the OpenRLHF flags), the
    rest of the key is one flag name: `openrlhf.rollout.n_samples_per_prompt=8`."""
    parts = key.split(".")
    node = data
    while parts:
        for cut in range(len(parts), 0, -1):
            head = ".".join(parts[:cut])
            if head in node:
                break
        else:
            cut = len(parts) if any("." in k for k in node) else 1
            head = ".".join(parts[:cut])
        rest = parts[cut:]
        if not rest:
            node[head] = value
            return
        child = node.get(head)
        if child is None:
            child = node[head] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override `{key}`: `{head}` is a value, not a section")
        node, parts = child, rest


def _format_errors(source: str, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        got = e.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"{source}: {key}: {e['msg']}{shown}")
    return "\n".join(lines)


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such config file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def validate(model: type[M], data: dict[str, Any], source: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_errors(source, e)) from None


def load(model: type[M], path: str | Path, overrides: Iterable[str] = ()) -> M:
    data = read_yaml(path)
    for key, value in parse_overrides(overrides):
        apply_override(data, key, value)
    return validate(model, data, str(path))


def resolve_model_path(stage_file: str | Path, model: str) -> Path:
    """A stage's `model:` path, tried from the working directory, then from the stage file's folder."""
    for candidate in (Path(model), Path(stage_file).parent / model):
        if candidate.is_file():
            return candidate
    raise ConfigError(f"{stage_file}: model: no such file {model!r} (give a path to configs/models/*.yaml)")


def load_stage(path: str | Path, overrides: Iterable[str] = ()) -> tuple[StageConfig, ModelConfig]:
    """A stage config and the model config it names; `model=...` among the overrides swaps the model."""
    stage = load(StageConfig, path, overrides)
    model_path = resolve_model_path(path, stage.model)
    return stage, load(ModelConfig, model_path)


def load_reward_spec(
    config: str | Path | None = None, preset: str | None = None, overrides: Iterable[str] = ()
) -> RewardSpec:
    """The reward spec of a stage config (`reward:` section) or of a named preset, with overrides.

    Overrides may name the spec's keys directly (`answer_metric=f1`) or with the `reward.` prefix.
    """
    from reward_server.spec import PRESETS

    if (config is None) == (preset is None):
        raise ConfigError("give exactly one of --config FILE or --preset NAME")
    pairs = [(k if k.startswith("reward.") else f"reward.{k}", v) for k, v in parse_overrides(overrides)]
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"--preset: unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
        data: dict[str, Any] = {"reward": PRESETS[preset].model_dump()}
        source = f"preset {preset}"
    else:
        data = read_yaml(config)  # type: ignore[arg-type]
        source = str(config)
        if "reward" not in data:
            raise ConfigError(f"{source}: reward: missing section (the reward spec of the stage)")
    for key, value in pairs:
        apply_override(data, key, value)
    if not isinstance(data["reward"], dict):
        raise ConfigError(f"{source}: reward: expected a mapping")
    try:
        return RewardSpec.model_validate(data["reward"])
    except ValidationError as e:
        raise ConfigError(_format_errors(source, e).replace(f"{source}: ", f"{source}: reward.")) from None
