"""YAML configs validated into pydantic models, with `key=value` overrides from the command line.

Errors name the file, the dotted key and what was expected, because a typo found after a GPU job
has started costs hours. OpenRLHF hyper-parameters stay under their own dotted flag names so the
mapping to `train_ppo_ray`'s parser is one-to-one.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

from searchrl.config import ConfigError, load
from searchrl.paths import CONFIGS, ROOT
from searchrl.protocols import DEFAULT_PROTOCOL, PROTOCOL_NAMES, PROTOCOLS, ProtocolName, get_protocol
from searchrl.reward.spec import RewardSpec, protocols_of
from searchrl.stage.algorithms import ALGORITHMS
from searchrl.stage.prompt import StagePrompt
from searchrl.stage.schedules import FORCED, SCHEDULES
from searchrl.stage.search import SEARCH_KINDS, StageSearchConfig

# The resolved stage config for the agent in every vLLM engine process: inline JSON (what a Ray
# submit sets, since env_vars reach every worker) or, for local runs, the path of a JSON file.
CONFIG_JSON_ENV = "SEARCHRL_CONFIG_JSON"
CONFIG_ENV = "SEARCHRL_CONFIG"
FlagValue = bool | int | float | str | list[str] | list[int] | list[float] | None


# Command-line stage names and their configs; `rag_r1` is stage 2 with RAG-R1's multi-query search.
# `search_r1` is Search-R1's recipe: stage 2's agent and data in its protocol, its reward, its algorithm.
STAGES = {
    "stage1": "stage1_format",
    "stage2": "stage2_answer",
    "router_r1": "router_r1",
    "rag_r1": "rag_r1",
    "search_r1": "search_r1",
}
# The folder holding a stage's agent file and data preparation, where it is not named after the stage.
STAGE_PACKAGES = {"router_r1": "stage_router_r1"}


def stage_package(stage: str) -> str:
    return STAGE_PACKAGES.get(stage, stage)


def stage_config_file(stage_name: str) -> Path:
    """The YAML file of a command-line stage name (`stage1` -> configs/stages/stage1_format.yaml)."""
    return CONFIGS / "stages" / f"{STAGES[stage_name]}.yaml"


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
    user: str = Field("{question}", description="chat models: the user turn, with {question}; may hold the rules")
    assistant_prefix: str = Field("<think>", description="chat models: text that opens the assistant turn")
    chat_template_kwargs: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="chat models: keyword arguments of the tokenizer's chat template, e.g. Qwen3's enable_thinking "
        "(a protocol that calls tools adds `tools`)",
    )

    @model_validator(mode="after")
    def _template_for_kind(self) -> ModelConfig:
        if self.kind == "base":
            if not self.template or "{question}" not in self.template:
                raise ValueError("a base model needs `template` containing {question}")
        elif not self.system and self.user.strip() == "{question}":
            raise ValueError("a chat model needs `system` (the search rules as a system message) or a `user` turn")
        if self.kind == "base" and self.chat_template_kwargs:
            raise ValueError("chat_template_kwargs: a base model's prompt is a plain template; remove the field")
        return self

    @property
    def tokenizer(self) -> str:
        return self.tokenizer_path or self.model_path


# Every reward weight lives in the one `reward:` spec; these episode keys of older configs moved there.
MOVED_TO_REWARD = {
    "process_reward_weight": "process_weight",
    "efficiency_weight": "efficiency_weight",
    "efficiency_group_size": "efficiency_group_size",
    "efficiency_timeout_s": "efficiency_timeout_s",
    "cost_weight": "cost_weight",
    "cost_window": "cost_window",
}


class EpisodeConfig(Strict):
    """The search episode: how many passages per search, how many searches, tokens per segment."""

    top_k: int = Field(3, ge=1, le=50)
    max_searches: int = Field(8, ge=0, le=64)
    max_segment_tokens: int = Field(512, ge=1)
    max_queries_per_block: int = Field(
        1, ge=1, le=16, description="queries one query block may hold, split on query_separator (RAG-R1); 1 = off"
    )
    query_separator: str = Field("||", min_length=1, description="separates the queries of one block")
    stop_after_answer: bool = Field(
        False, description="end a segment at </answer>, as Router-R1 cuts its responses there (nothing after it)"
    )
    max_tokens_per_query: int | None = Field(
        None,
        ge=1,
        description="each query's documents cut to this many tokens of the policy's tokenizer (words where the "
        "environment has none), each query on its own (RAG-R1); None = uncut",
    )
    max_turns: int | None = Field(
        None,
        ge=0,
        description="Search-R1's turn limit: after this many turns that searched (or wrote an invalid action), one "
        "last segment is generated and its search, if any, is not run; None: max_searches alone caps the episode, "
        "a search over it ending the episode unanswered (R1-Searcher)",
    )
    max_observation_tokens: int | None = Field(
        None,
        ge=1,
        description="each observation the environment appends (documents, a failed search, the invalid-action "
        "message) cut to its first N tokens of the policy's tokenizer, closing tag and all, as Search-R1's "
        "_process_next_obs cuts at max_obs_length (its protocol's default: 500); None = uncut",
    )
    bare_titles: bool = Field(
        False,
        description="render each passage's title without the quotes Search-R1's protocol puts around it as its "
        'wiki-18 corpus writes them (Doc 1(Title: "Paris") ... by default); other protocols write bare titles either '
        "way",
    )

    @model_validator(mode="before")
    @classmethod
    def _moved_to_reward(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for old, new in MOVED_TO_REWARD.items():
                if old in data:
                    raise ValueError(f"`episode.{old}` moved to the reward spec: write `reward.{new}` instead")
        return data


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


class EpisodesConfig(Strict):
    """The sample of episodes a run keeps (searchrl/episodes/): the first `per_step` of each engine's share of a
    rollout step, as JSON lines a run's viewer reads beside its TensorBoard curves."""

    per_step: int = Field(8, ge=0, description="episodes kept a rollout step, per engine process; 0 keeps none")
    dir: str | None = Field(
        None,
        min_length=1,
        description="where the records go; None: `episodes/` beside the run's TensorBoard folder (else beside "
        "ckpt.output_dir), made absolute by the job's plan (searchrl/job/plan.py)",
    )
    max_windows: int = Field(
        500, ge=4, description="files (one a step) an engine process keeps; past it the older half thins out"
    )
    source: Literal["train", "rehearsal"] = Field("train", description="what wrote them: a rehearsal marks its own")


class StageConfig(Strict):
    stage: Literal["stage1_format", "stage2_answer", "router_r1"]
    model: str = Field(description="path of a configs/models/*.yaml file")
    init_from: str | None = Field(None, description="a stage config whose final checkpoint is the starting policy")
    reward: RewardSpec
    protocol: ProtocolName = Field(
        DEFAULT_PROTOCOL, description="the tag protocol the policy, the environment and the reward speak"
    )
    episode: EpisodeConfig = EpisodeConfig()
    search: StageSearchConfig = StageSearchConfig()
    reward_server: RewardServerConfig = RewardServerConfig()
    prompt: StagePrompt | None = Field(None, description="the stage's own prompt text, over the model config's")
    algorithm: Literal["ppo", "reinforce++", "grpo", "search-r1-ppo"] | None = Field(
        None, description="a flag set of searchrl/stage/algorithms.py, merged under `openrlhf:` (whose flags win)"
    )
    schedule: Literal["sync", "async", "async-partial"] = Field(
        "sync", description="how generation and training take turns: searchrl/stage/schedules.py"
    )
    openrlhf: dict[str, FlagValue] = Field(default_factory=dict, description="train_ppo_ray flags, without `--`")
    episodes: EpisodesConfig = EpisodesConfig()

    @model_validator(mode="before")
    @classmethod
    def _named_flag_sets(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = protocol_episode(data)
        algorithm = ALGORITHMS.get(data.get("algorithm"), {})  # type: ignore[arg-type]
        schedule = data.get("schedule", "sync")
        if schedule not in SCHEDULES:
            return data  # the field's own check names the choices
        flags = {**algorithm, **SCHEDULES[schedule], **(data.get("openrlhf") or {}), **FORCED[schedule]}
        return {**data, "openrlhf": flags}

    @field_validator("openrlhf")
    @classmethod
    def _flag_names(cls, flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
        return flag_names_without_dashes(flags)

    @model_validator(mode="after")
    def _one_protocol(self) -> StageConfig:
        # A run speaks one tag protocol: the agent writes it, the environment answers in it, the reward reads it.
        if self.protocol in protocols_of(self.reward.formula) and self.reward.reads != self.protocol:
            raise ValueError(
                f"protocol: {self.protocol}, and reward.protocol is {self.reward.reads}: set "
                f"`reward.protocol: {self.protocol}`, so the reward reads the tags the stage speaks"
            )
        if self.protocol not in protocols_of(self.reward.formula):
            fitting = [
                f for f in get_args(RewardSpec.model_fields["formula"].annotation) if self.protocol in protocols_of(f)
            ]
            raise ValueError(
                f"protocol: {self.protocol}, and reward.formula {self.reward.formula} reads {self.reward.reads}'s "
                f"tags: set `protocol={self.reward.reads}`, or a formula that reads {self.protocol}'s "
                f"({', '.join(fitting)})"
            )
        problem = episode_problem(self.protocol, self.episode, self.search.backend)
        if problem:
            raise ValueError(problem)
        return self


def default_episodes_dir(flags: dict[str, FlagValue]) -> str | None:
    """`episodes/` beside the run's TensorBoard folder (runs/stage1_format/tensorboard -> runs/stage1_format/episodes),
    else beside its final checkpoint, as the flags write them (relative ones from the checkout's root); None when the
    flags name neither."""
    for flag in ("logger.tensorboard_dir", "ckpt.output_dir"):
        value = flags.get(flag)
        if isinstance(value, str) and value.strip():
            return str(Path(value).parent / "episodes")
    return None


def episode_share(flags: dict[str, FlagValue]) -> int:
    """The episodes one engine process finishes in a rollout step: rollout.batch_size x n_samples_per_prompt over
    vllm.num_engines (OpenRLHF spreads a step's prompts evenly over its engines), at least 1."""

    def flag(name: str, default: int) -> int:
        try:
            return max(1, int(flags.get(name) or default))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return default

    # OpenRLHF's own defaults where a flag is unset: a share of 1 would keep every episode in a file of its own.
    batch = flag("rollout.batch_size", 1024) * flag("rollout.n_samples_per_prompt", 1)
    return max(1, batch // flag("vllm.num_engines", 1))


def protocol_episode(data: dict[str, Any]) -> dict[str, Any]:
    """The stage with its protocol's episode defaults (EPISODE_DEFAULTS) under the episode keys it does not set."""
    name = data.get("protocol", DEFAULT_PROTOCOL)
    if name not in PROTOCOL_NAMES:
        return data  # the field's own check names the choices
    defaults = get_protocol(name).EPISODE_DEFAULTS
    episode = data.get("episode")
    if not defaults or not (episode is None or isinstance(episode, dict)):
        return data
    return {**data, "episode": {**defaults, **(episode or {})}}


def episode_problem(protocol: str, episode: EpisodeConfig, backend: str = "http") -> str | None:
    """Why an episode's settings (and its search backend) do not fit a tag protocol; None when they do."""
    speaks = get_protocol(protocol)
    if episode.max_turns is None and speaks.INVALID_ACTION is not None:
        # Its episode goes on after a turn that neither searches nor answers: only a turn limit ends such a loop.
        return f"episode.max_turns: protocol {protocol} goes on after an invalid turn; set a turn limit (Search-R1: 2)"
    if episode.max_queries_per_block > 1 and not speaks.MULTI_QUERY:
        several = " or ".join(name for name, p in PROTOCOLS.items() if p.MULTI_QUERY)
        return (
            f"episode.max_queries_per_block: protocol {protocol} takes one query a search; set it to 1, or speak "
            f"{several} (several queries a search)"
        )
    if (own := speaks.episode_problem(episode)) is not None:
        return own
    if SEARCH_KINDS[backend].routes_to_models and speaks.ROUTER_TAGS is None:
        routes = " or ".join(name for name, p in PROTOCOLS.items() if p.ROUTER_TAGS is not None)
        return f"search.backend {backend}: LLM routing speaks the tags of {routes}, not {protocol}"
    return None


def flag_names_without_dashes(flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
    """OpenRLHF flags are kept under their own names without `--`, so the mapping to its CLI stays one-to-one."""
    for name in flags:
        if name.startswith("-"):
            raise ValueError(f"write the flag `{name}` without the leading dashes")
    return flags


def config_path(stage_file: str | Path, value: str) -> Path | None:
    """A relative path a stage config holds (`model:`, `init_from:`), by one rule that does not depend on the working
    folder: from the checkout's root, as the shipped configs write them, else from the stage config's own folder
    (a config of yours beside its model config). None when neither holds the file."""
    path = Path(value)
    candidates = [path] if path.is_absolute() else [ROOT / path, Path(stage_file).resolve().parent / path]
    return next((c for c in candidates if c.is_file()), None)


def resolve_model_path(stage_file: str | Path, model: str) -> Path:
    """A stage's `model:` path (`config_path`'s rule)."""
    found = config_path(stage_file, model)
    if found is None:
        raise ConfigError(
            f"{stage_file}: model: no such file {model!r} from the checkout's root ({ROOT}) or the stage config's "
            "folder (give a path to configs/models/*.yaml)"
        )
    return found


def load_stage(path: str | Path, overrides: Iterable[str] = ()) -> tuple[StageConfig, ModelConfig]:
    """A stage config and the model config it names; `model=...` among the overrides swaps the model."""
    stage = load(StageConfig, path, overrides)
    model_path = resolve_model_path(path, stage.model)
    return stage, load(ModelConfig, model_path)
