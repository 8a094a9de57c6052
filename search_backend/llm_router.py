"""LLM routing as a search backend (Router-R1's idea): the "search" is a question put to one of a
pool of LLMs behind OpenAI-compatible endpoints, named in the query as `model-name: question`.

Each answer comes back as one passage whose `cost` is its tokens times the model's price, so the
environment can charge it; the questions of one step go out in parallel.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, ConfigDict, Field

from search_backend.base import Passage, SearchAuthError, SearchError
from searchrl.http_transport import HttpRefusedError, HttpSession, RequestEncodingError, RetryableError, RetryPolicy
from searchrl.openai_client import ChatAnswer, OpenAIClient, key_from_env

INSTRUCTION = "Answer the question briefly and factually, in a few sentences at most."


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


class RouterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[RoutedModel] = Field(min_length=1)
    timeout_s: float = Field(60.0, gt=0)
    retries: int = Field(2, ge=0)


class LLMRouterBackend:
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

    @classmethod
    def from_config(cls, config: RouterConfig) -> LLMRouterBackend:
        return cls(config)

    def route(self, query: str) -> tuple[RoutedModel | None, str]:
        name, sep, question = query.partition(":")
        if sep and name.strip() in self.models:
            return self.models[name.strip()], question.strip()
        return None, query

    async def _ask(self, model: RoutedModel, question: str) -> Passage:
        messages = [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": question}]
        try:
            answer: ChatAnswer = await self._clients[model.name].chat(
                model.model, messages, max_tokens=model.max_tokens, temperature=0
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

        async def one(query: str) -> list[Passage]:
            model, question = self.route(query)
            if model is None:
                names = ", ".join(self.models)
                return [
                    Passage(
                        id="router",
                        title="router",
                        score=0.0,
                        text=f"No model was named. Write the query as `model: question`, with model one of: {names}.",
                    )
                ]
            return [await self._ask(model, question)]

        return list(await asyncio.gather(*(one(q) for q in queries)))

    async def aclose(self) -> None:
        await self._http.aclose()
