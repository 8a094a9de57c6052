"""LLM routing as a search backend (Router-R1's idea): the "search" is a question put to one of a
pool of LLMs behind OpenAI-compatible endpoints, named in the query as `model-name: question`.

Each answer comes back as one passage whose `cost` is its tokens times the model's price, so the
environment can charge it; the questions of one step go out in parallel. A query that picks no pool
model gets a passage with id `UNROUTED`, which the environment counts (Router-R1 punishes such names).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from searchrl.config import ConfigError, read_yaml, validate
from searchrl.http_transport import HttpRefusedError, HttpSession, RequestEncodingError, RetryableError, RetryPolicy
from searchrl.openai_client import ChatAnswer, OpenAIClient, key_from_env
from searchrl.routing.gmtrouter.policy import GMTRouterPolicy, GMTRouterPolicyConfig
from searchrl.routing.names import Naming, is_placeholder, pick, split_query
from searchrl.search.base import BackendTraits, Passage, SearchAuthError, SearchError

INSTRUCTION = "Answer the question briefly and factually, in a few sentences at most."
UNROUTED = "router"  # the id of the passage a query naming no pool model gets


class RoutedModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="what the policy writes before the colon")
    base_url: str = Field(description="OpenAI-compatible endpoint, e.g. http://host:8000/v1")
    model: str = Field(description="the model name at that endpoint")
    api_key_env: str | None = Field(None, description="env var holding the endpoint's key")
    price_per_1k_prompt: float = Field(0.0, ge=0)
    price_per_1k_completion: float = Field(0.0, ge=0)
    max_tokens: int = Field(256, ge=1)
    description: str = Field("", description="what the prompt tells the policy about this model")
    latency_s: float | None = Field(None, ge=0, description="typical seconds per answer, shown in the prompt")
    match: list[str] = Field(
        default_factory=list, description="naming router_r1: lower-case words a written name must hold (family first)"
    )
    temperature: float = Field(0.0, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = None


class RouterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(None, description="the endpoint of every model that names none of its own")
    api_key_env: str | None = Field(None, description="the key of every model that names none of its own")
    models: list[RoutedModel] = Field(min_length=1)
    timeout_s: float = Field(60.0, gt=0)
    retries: int = Field(2, ge=0)
    policy: GMTRouterPolicyConfig | None = Field(
        None, description="picks the model for queries that name none, or `auto:` / `auto@user:` (GMTRouter)"
    )
    naming: Naming = Field("exact", description="how a written name picks a model: exact, or router_r1 (by words)")
    framing: str | None = Field(
        None,
        description="the routed model's one user message, with {question} on its last line; "
        "none: a short system instruction, then the question",
    )
    unrouted_text: str | None = Field(
        None, description="what a query naming no pool model gets back; none: the list of the pool's names"
    )

    @model_validator(mode="before")
    @classmethod
    def _pool_endpoint(cls, data: Any) -> Any:
        # One endpoint and key for the whole pool (Router-R1's api_base / api_key), unless a model has its own.
        if isinstance(data, dict) and isinstance(data.get("models"), list):
            shared = {k: data[k] for k in ("base_url", "api_key_env") if data.get(k)}
            data = {**data, "models": [{**shared, **m} if isinstance(m, dict) else m for m in data["models"]]}
        return data

    @model_validator(mode="after")
    def _naming_words(self) -> RouterConfig:
        if self.naming == "router_r1":
            bare = [m.name for m in self.models if not m.match]
            if bare:
                raise ValueError(f"naming router_r1: give `match` words for {bare}")
        if self.framing is not None and not self.framing.rstrip().endswith("{question}"):
            raise ValueError("framing: must end with {question} (the loopback pool reads the question there)")
        return self


def read_pool(stage_config: str | Path) -> RouterConfig:
    """The pool (`search.router`) of a stage config file, for the routing tools that need only the pool."""
    router = (read_yaml(stage_config).get("search") or {}).get("router")
    if router is None:
        raise ConfigError(f"{stage_config}: search.router: no pool (a routing stage config names its models there)")
    return validate(RouterConfig, router, f"{stage_config}: search.router")


class RoutingPolicy(Protocol):
    def choose(self, items: Sequence[tuple[str | None, str]], allowed: Sequence[str]) -> list[str]:
        """A model name from `allowed` for each (user or None, question)."""
        ...


POLICIES: dict[str, type] = {"gmtrouter": GMTRouterPolicy}


def auto_query(query: str) -> tuple[str | None, str]:
    """(user, question) of a query routed by the policy: `auto@u17: q` names user u17, `auto: q` and a
    query naming no model leave the user to the policy's default."""
    head, sep, rest = query.partition(":")
    head = head.strip()
    if sep and (head == "auto" or head.startswith("auto@")):
        return head[5:].strip() or None, rest.strip()
    return None, query.strip()


class LLMRouterBackend(BackendTraits):
    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.models = {m.name: m for m in config.models}
        self._http = HttpSession(timeout_s=config.timeout_s, max_in_flight=256)
        retry = RetryPolicy(retries=config.retries, backoff_s=0.2, backoff_max_s=5.0)
        # One session for the pool; the key is read when the backend opens, as the job's env_vars set it.
        self._clients = {
            m.name: OpenAIClient(m.base_url, api_key=key_from_env(m.api_key_env), retry=retry, session=self._http)
            for m in config.models
        }
        self.policy: RoutingPolicy | None = None
        if config.policy is not None:
            self.policy = POLICIES[config.policy.kind].from_config(config.policy, pool=list(self.models))

    routes_to_models = True

    @classmethod
    def open(cls, config: Any) -> LLMRouterBackend:
        # The router keeps its options in a section of its own, as the web backend does.
        if config.router is None:
            raise ValueError("search.router: required for backend: router (the pool of models)")
        return cls.from_config(config.router)

    @classmethod
    def secret_envs(cls, config: Any) -> list[str]:
        return [m.api_key_env for m in config.router.models if m.api_key_env] if config.router is not None else []

    @classmethod
    def identity(cls, config: Any) -> dict[str, Any]:
        models = [m.name for m in config.router.models] if config.router is not None else []
        return {"backend": config.backend, "index": None, "options": {"models": models}}

    @classmethod
    def from_config(cls, config: RouterConfig) -> LLMRouterBackend:
        return cls(config)

    def route(self, query: str) -> tuple[RoutedModel | None, str]:
        naming = self.config.naming
        split = split_query(query, naming)
        if split is None or (naming == "router_r1" and (is_placeholder(query) or not split[1])):
            return None, query
        model = pick(split[0], self.config.models, naming)
        return (model, split[1]) if isinstance(model, RoutedModel) else (None, query)

    def messages(self, question: str) -> list[dict[str, str]]:
        if self.config.framing is not None:
            return [{"role": "user", "content": self.config.framing.replace("{question}", question)}]
        return [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": question}]

    async def _ask(self, model: RoutedModel, question: str) -> Passage:
        sampling = {"top_p": model.top_p, "seed": model.seed}
        try:
            answer: ChatAnswer = await self._clients[model.name].chat(
                model.model,
                self.messages(question),
                max_tokens=model.max_tokens,
                temperature=model.temperature,
                **{k: v for k, v in sampling.items() if v is not None},
            )
        except RequestEncodingError as e:
            raise SearchError(f"{model.name}: question not sent: {e}") from None
        except HttpRefusedError as e:
            kind = SearchAuthError if e.status in (401, 403) else SearchError
            raise kind(f"{model.name} refused the question: HTTP {e.status}") from None
        except RetryableError as e:
            raise SearchError(f"{model.name}: {e} (after {e.tries} tries)") from None
        usage = answer.usage
        cost = (
            usage.get("prompt_tokens", 0) * model.price_per_1k_prompt
            + usage.get("completion_tokens", 0) * model.price_per_1k_completion
        ) / 1000
        return Passage(id=model.name, title=model.name, text=answer.content.strip(), score=1.0, cost=cost)

    async def search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        """One answer per query, from the model it names; an unknown name gets the list of models."""

        routed = [self.route(q) for q in queries]
        unnamed = [i for i, (model, _) in enumerate(routed) if model is None]
        if self.policy is not None and unnamed:
            items = [auto_query(queries[i]) for i in unnamed]
            # Scoring embeds the questions: CPU work kept off the event loop.
            picks = await asyncio.to_thread(self.policy.choose, items, list(self.models))
            for i, (_, question), name in zip(unnamed, items, picks, strict=True):
                routed[i] = (self.models[name], question)

        async def one(route: tuple[RoutedModel | None, str]) -> list[Passage]:
            model, question = route
            if model is None:
                names = ", ".join(self.models)
                text = self.config.unrouted_text or (
                    f"No model was named. Write the query as `model: question`, with model one of: {names}."
                )
                return [Passage(id=UNROUTED, title="router", score=0.0, text=text)]
            return [await self._ask(model, question)]

        return list(await asyncio.gather(*(one(r) for r in routed)))

    async def aclose(self) -> None:
        await self._http.aclose()
