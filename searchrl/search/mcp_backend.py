"""A backend that searches through a tool of an MCP server, with the official SDK's client: `searchrl search mcp`,
or any server whose tool takes a query, over streamable HTTP or stdio (`search.mcp`: `mcp_settings.py`).

One tool call a query: the queries of one `search(queries, top_k)` go at once, at most `max_in_flight` calls over
all searches, and the whole call must end within `search.deadline_s`. What the tool answers, best first:

    {"results": [{"id": str, "title": str, "text": str, "score": float}, ...]}

as its structured content or as JSON in its first text block; a missing `title` is "", `id` the rank, `score`
1 / rank, and `result` is read as `results` (how the SDK wraps a tool returning a bare list). A tool error raises
SearchRefusedError unless its structured content names the kind, `{"error": KIND, "message": str}` with a KIND of
ERROR_KINDS, as `searchrl search mcp` answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
from collections import OrderedDict
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from searchrl.search.base import (
    BackendTraits,
    Passage,
    SearchAuthError,
    SearchBudgetError,
    SearchError,
    SearchRefusedError,
    normalise_query,
)
from searchrl.search.mcp_settings import McpConfig
from searchrl.search.settings import DEFAULT_DEADLINE_S

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 10.0
MAX_TOOL_PAGES = 100  # tools/list pages read at connect: a listing that never ends cannot hang a search


class McpServerError(SearchError):
    """The server cannot serve this run (no such tool, a command that cannot start, or a tool that says every later
    search would fail too): the run stops instead of training on "search failed" documents."""

    ends_run = True


class McpAnswerError(SearchError):
    """The server answered, but not with passages (not the shape above, or not its tool's own output schema):
    asking again would get the same answer, so it is not retried."""


# The kinds a tool error may name, and the error each raises here; `searchrl search mcp` names them (error_kind).
ERROR_KINDS: dict[str, type[SearchError]] = {
    "retryable": SearchError,
    "refused": SearchRefusedError,
    "auth": SearchAuthError,
    "budget": SearchBudgetError,
    "fatal": McpServerError,
}


def error_kind(exc: SearchError) -> str:
    """The kind a server names for `exc`, so that its client raises the same type of error."""
    for kind in ("auth", "budget", "refused"):
        if isinstance(exc, ERROR_KINDS[kind]):
            return kind
    return "fatal" if exc.ends_run else "retryable"


def passages(result: Any, top_k: int) -> list[Passage]:
    """A tool's answer (an SDK CallToolResult) as passages; McpAnswerError when it is not the shape above."""
    if result.is_error:
        raise tool_error(result)
    body = result.structured_content
    if body is None:
        texts = [block.text for block in result.content if getattr(block, "type", None) == "text"]
        try:
            body = json.loads(texts[0]) if texts else None
        except ValueError:
            body = None
    hits = body.get("results", body.get("result")) if isinstance(body, dict) else None
    if not isinstance(hits, list):
        raise McpAnswerError(f'malformed tool answer: expected {{"results": [...]}}, got {str(body)[:200]}')
    try:
        return [_passage(hit, rank) for rank, hit in enumerate(hits[:top_k], start=1)]
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise McpAnswerError(f"malformed tool answer: {exc!r}") from None


def _passage(hit: dict[str, Any], rank: int) -> Passage:
    score = hit.get("score")
    return Passage(
        str(hit.get("id", rank)),
        str(hit.get("title") or ""),
        str(hit["text"]),
        1 / rank if score is None else float(score),
    )


def tool_error(result: Any) -> SearchError:
    body = result.structured_content if isinstance(result.structured_content, dict) else {}
    text = " ".join(getattr(block, "text", "") for block in result.content).strip()
    message = str(body.get("message") or text or "the tool failed without a message")
    return ERROR_KINDS.get(str(body.get("error")), SearchRefusedError)(f"the search tool answered an error: {message}")


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


@dataclass
class _Session:
    client: Any
    stop: asyncio.Event
    task: asyncio.Task[None]


@dataclass
class _LoopState:
    """What belongs to one event loop: asyncio's locks and the SDK's streams cannot be used from another."""

    loop: asyncio.AbstractEventLoop
    lock: asyncio.Lock
    slots: asyncio.Semaphore
    session: _Session | None = None


class McpSearchBackend(BackendTraits):
    """A session opened on first use in the running event loop (a new loop opens its own) and held by a task of its
    own, since the SDK's client must be left in the task that entered it. A connection that fails is dropped and
    opened again, with jittered backoff, until the deadline (or `retries` extra tries); a refusal of the call
    (invalid arguments, unknown method) raises at once, a 401/403 over HTTP raises SearchAuthError."""

    # A search through this project's server, or a tool of one's own: one free call shows that it answers.
    probed_before_run = True

    def __init__(
        self,
        config: McpConfig,
        *,
        deadline_s: float = DEFAULT_DEADLINE_S,
        retries: int | None = None,
        backoff_s: float = 0.5,
        backoff_max_s: float = 8.0,
        token: str | None = None,
    ) -> None:
        self.config = config
        self.deadline_s = deadline_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.calls = 0
        self.cache_hits = 0
        self._token = token
        self._cache: OrderedDict[tuple[str, int], list[Passage]] = OrderedDict()
        self._state: _LoopState | None = None
        self._refused_status: int | None = None
        self._last_failure = ""

    def __repr__(self) -> str:
        return f"McpSearchBackend({self.config.server!r}, tool={self.config.tool!r})"  # never the token

    @classmethod
    def open(cls, config: Any) -> McpSearchBackend:
        mcp = config.mcp or McpConfig()
        return cls(
            mcp,
            deadline_s=config.deadline_s,
            retries=config.retries,
            backoff_s=config.backoff_s,
            backoff_max_s=config.backoff_max_s,
            token=os.environ.get(mcp.token_env) if mcp.command is None else None,
        )

    @classmethod
    def secret_envs(cls, config: Any) -> list[str]:
        mcp = config.mcp or McpConfig()
        return [mcp.token_env] if mcp.command is None else list(mcp.env)

    @classmethod
    def identity(cls, config: Any) -> dict[str, Any]:
        mcp = config.mcp or McpConfig()
        return {"backend": config.backend, "index": None, "options": {"server": mcp.server, "tool": mcp.tool}}

    @classmethod
    def check_shared(cls, config: Any) -> None:
        mcp = config.mcp or McpConfig()
        if mcp.max_calls is not None:
            raise ValueError(
                "mcp.max_calls: counted in each process, and a run's engines each open the backend; cap the run at "
                "the server instead (searchrl search mcp over a web backend with search.web.budget_path)"
            )

    async def search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        if not queries:
            return []
        keys = [(normalise_query(q), top_k) for q in queries]
        answers: dict[tuple[str, int], list[Passage]] = {}
        todo: dict[tuple[str, int], str] = {}
        for key, query in zip(keys, queries, strict=True):
            hits = self._cached(key)
            if hits is None:
                todo.setdefault(key, query)
            else:
                answers[key] = hits
        if todo:
            if self.config.command is not None:
                await self._started()
            found = await self._answer_all(list(todo.values()), top_k)
            answers.update(zip(todo, found, strict=True))
        return [list(answers[key]) for key in keys]

    async def _started(self) -> None:
        """A stdio server loads its index before it answers (seconds to minutes): its start is given
        start_timeout_s outside the call's deadline, or an evaluation's 5 s probe would fail it."""
        state = self._loop_state()
        if state.session is not None and not state.session.task.done():
            return
        try:
            async with asyncio.timeout(self.config.start_timeout_s):
                await self._session(state)
        except SearchError:
            raise
        except TimeoutError:
            raise McpServerError(
                f"{self.config.server} did not start within search.mcp.start_timeout_s={self.config.start_timeout_s:g}"
            ) from None
        except Exception as exc:
            error = self._failure(exc)
            raise error if type(error) is not SearchError else McpServerError(f"did not start: {error}") from None

    async def _answer_all(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        self._last_failure = ""
        try:
            async with asyncio.timeout(self.deadline_s), asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._answer(q, top_k)) for q in queries]
        except TimeoutError:
            last = f" (last failure: {self._last_failure})" if self._last_failure else ""
            raise SearchError(
                f"{self.config.server}: no answer within the {self.deadline_s:g} s deadline{last}"
            ) from None
        except BaseExceptionGroup as group:
            errors = [e for e in _leaves(group) if isinstance(e, SearchError)]
            if not errors:
                raise
            raise next((e for e in errors if e.ends_run), errors[0]) from None
        return [task.result() for task in tasks]

    async def _answer(self, query: str, top_k: int) -> list[Passage]:
        hits = await self._call(query, top_k)
        self._remember((normalise_query(query), top_k), hits)
        return hits

    async def _call(self, query: str, top_k: int) -> list[Passage]:
        arguments: dict[str, Any] = {self.config.query_arg: query}
        if self.config.top_k_arg:
            arguments[self.config.top_k_arg] = top_k
        state = self._loop_state()
        attempt = 0
        while True:
            session = None
            try:
                session = await self._session(state)
                async with state.slots:
                    self._spend_call()
                    result = await session.client.call_tool(self.config.tool, arguments)
            except SearchError:
                raise
            except Exception as exc:
                error = self._failure(exc)
                if type(error) is not SearchError or (self.retries is not None and attempt >= self.retries):
                    raise error from None
                self._last_failure = str(error)
                if session is not None:
                    self._drop(state, session)
                await asyncio.sleep(min(self.backoff_max_s, self.backoff_s * 2**attempt) * random.uniform(0.5, 1))
                attempt += 1
                continue
            return passages(result, top_k)

    def _spend_call(self) -> None:
        # Counted before the call is sent, in one step of the event loop: concurrent searches stop exactly there.
        if self.config.max_calls is not None and self.calls >= self.config.max_calls:
            raise SearchBudgetError(
                f"search budget exhausted: search.mcp.max_calls={self.config.max_calls} reached ({self.calls} tool "
                f"calls sent to {self.config.server}); raise search.mcp.max_calls"
            )
        self.calls += 1

    def _failure(self, exc: Exception) -> SearchError:
        """What a failed connect or call means: credentials refused, this call refused, a server that cannot run,
        an answer off its tool's schema, or trouble a new connection may cure (a plain SearchError, tried again)."""
        from mcp import MCPError
        from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND

        server = self.config.server
        if self._refused_status is not None:
            return SearchAuthError(
                f"{server} refused the credentials: HTTP {self._refused_status}; set the server's token in the "
                f"variable search.mcp.token_env names (${self.config.token_env})"
            )
        leaves = _leaves(exc)
        for leaf in leaves:
            if isinstance(leaf, MCPError) and leaf.code in (INVALID_PARAMS, METHOD_NOT_FOUND):
                return SearchRefusedError(f"{server} refused the call: {leaf.message}")
            if isinstance(leaf, FileNotFoundError | PermissionError) and self.config.command is not None:
                return McpServerError(f"cannot start {server}: {leaf}")
            if isinstance(leaf, RuntimeError):  # the SDK's check of an answer against the tool's output schema
                return McpAnswerError(f"{server}: {leaf}")
        return SearchError(f"{server}: " + "; ".join(f"{type(e).__name__}: {e}" for e in leaves))

    def _loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        if self._state is None or self._state.loop is not loop:
            # A session of a loop that is gone cannot be closed, only left: its server sees stdin or the socket close.
            self._state = _LoopState(loop, asyncio.Lock(), asyncio.Semaphore(self.config.max_in_flight))
        return self._state

    async def _session(self, state: _LoopState) -> _Session:
        async with state.lock:
            if state.session is None or state.session.task.done():
                state.session = await self._connect()
            return state.session

    def _drop(self, state: _LoopState, session: _Session) -> None:
        session.stop.set()
        if state.session is session:
            state.session = None

    async def _connect(self) -> _Session:
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        self._refused_status = None
        task = asyncio.create_task(self._hold(ready, stop), name=f"MCP session with {self.config.server}")
        try:
            client = await ready
            await self._check_tool(client)
        except BaseException:
            stop.set()
            task.cancel()
            raise
        return _Session(client, stop, task)

    async def _hold(self, ready: asyncio.Future[Any], stop: asyncio.Event) -> None:
        """Open a session, hand its client over and keep it open until `stop`."""
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(self._client(stack))
                if not ready.done():
                    ready.set_result(client)
                await stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.warning("MCP session with %s ended: %s", self.config.server, exc)

    def _client(self, stack: AsyncExitStack) -> Any:
        from mcp import Client, StdioServerParameters

        if self.config.command is not None:
            program, *args = self.config.command
            env = {name: os.environ[name] for name in self.config.env if name in os.environ}
            return Client(StdioServerParameters(command=program, args=args, env=env, cwd=self.config.cwd))
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
        # The SDK reports a 401 as a generic error response: the status is read here to raise SearchAuthError.
        http = httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(30.0, read=300.0), event_hooks={"response": [self._saw]}
        )
        stack.push_async_callback(http.aclose)
        assert self.config.url is not None
        return Client(streamable_http_client(self.config.url, http_client=http))

    async def _saw(self, response: Any) -> None:
        if response.status_code in (401, 403):
            self._refused_status = response.status_code

    async def _check_tool(self, client: Any) -> None:
        names: list[str] = []
        cursor = None
        for _ in range(MAX_TOOL_PAGES):
            listing = await client.list_tools(cursor=cursor)
            names += [tool.name for tool in listing.tools]
            cursor = listing.next_cursor
            if not cursor or self.config.tool in names:
                break
        if self.config.tool not in names:
            raise McpServerError(
                f"{self.config.server} has no tool {self.config.tool!r} (it has {', '.join(names) or 'none'}); "
                "set search.mcp.tool"
            )

    def _cached(self, key: tuple[str, int]) -> list[Passage] | None:
        hits = self._cache.get(key)
        if hits is not None:
            self._cache.move_to_end(key)
            self.cache_hits += 1
        return hits

    def _remember(self, key: tuple[str, int], hits: list[Passage]) -> None:
        if self.config.cache_size == 0:
            return
        self._cache[key] = hits
        self._cache.move_to_end(key)
        while len(self._cache) > self.config.cache_size:
            self._cache.popitem(last=False)

    async def aclose(self) -> None:
        state, self._state = self._state, None
        if state is None or state.session is None or state.loop is not asyncio.get_running_loop():
            return
        state.session.stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(state.session.task, CLOSE_TIMEOUT_S)

    async def __aenter__(self) -> McpSearchBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
