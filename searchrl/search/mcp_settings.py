"""McpConfig: the `search.mcp:` section, for backend: mcp (`searchrl/search/mcp_backend.py`): which MCP server, which
of its tools answers a search, and the client's bounds (calls in flight, cache, budget)."""

from __future__ import annotations

import shlex
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, field_validator, model_validator

# `searchrl search mcp --transport http` listens here by default (the retrieval server takes 8002).
DEFAULT_URL = "http://127.0.0.1:8003/mcp"


class McpConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(
        default=None, description=f"the server's streamable HTTP endpoint; default {DEFAULT_URL} unless command is set"
    )
    command: list[str] | None = Field(
        default=None,
        description="a server spoken to over stdio: its argv, or one string split as a shell would "
        "(e.g. 'searchrl search mcp --index indexes/kilt-bge')",
    )
    env: list[str] = Field(
        default_factory=list,
        description="environment variables passed on to the command (the SDK passes only HOME, PATH and a few more)",
    )
    cwd: Path | None = Field(default=None, description="the command's working directory")
    start_timeout_s: float = Field(
        default=300.0, gt=0, description="how long the command may take to answer (it may load an index first)"
    )
    tool: str = Field(default="search", min_length=1, description="the tool that answers one query")
    query_arg: str = Field(default="query", min_length=1, description="the tool's argument holding the query")
    top_k_arg: str | None = Field(
        default="top_k", description="the tool's argument holding top_k; null: not sent (the answer is cut to top_k)"
    )
    token_env: str = Field(
        default="SEARCHRL_MCP_TOKEN", description="env var holding the bearer token sent over HTTP, when set"
    )
    max_in_flight: int = Field(default=64, ge=1, description="tool calls in flight at once, over all searches")
    cache_size: NonNegativeInt = Field(default=10_000, description="LRU answers kept in memory (0: no cache)")
    max_calls: NonNegativeInt | None = Field(
        default=None, description="tool calls this process may send (cache hits are free); None: no limit"
    )

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, value: object) -> object:
        return shlex.split(value) if isinstance(value, str) else value

    @field_validator("command")
    @classmethod
    def _command_names_a_program(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or not value[0]):
            raise ValueError("must name a program to run, e.g. 'searchrl search mcp --index DIR'")
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(
                f"must be an http(s) URL of a streamable HTTP endpoint (e.g. {DEFAULT_URL}), got {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _one_server(self) -> McpConfig:
        if self.url is not None and self.command is not None:
            raise ValueError("url and command: set one (a streamable HTTP endpoint, or a stdio server to start)")
        if self.command is None and self.url is None:
            self.url = DEFAULT_URL
        return self

    @property
    def server(self) -> str:
        """The server as a log line or an evaluation's identity shows it: its URL, or its command line."""
        return self.url if self.command is None else shlex.join(self.command)
