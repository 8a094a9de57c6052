"""`searchrl view RUN_DIR`: a run's episodes and curves in the browser, served on loopback, or `--export FILE.html`.

The app reads the run through a RunStore held by its lifespan: every API call re-checks the run's files (at most
every `refresh_s / 2` seconds) and re-reads only those that changed, so the page's polling of a live run is cheap.
Reading and filtering run in the thread pool, never on the event loop.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, cast

import uvicorn
from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import SecretStr
from starlette.concurrency import run_in_threadpool

from searchrl.episodes.reader import EPISODES_DIR
from searchrl.process import free_port
from searchrl.server import ErrorBody, RequestGuard, error_response, server_token
from searchrl.view.listing import (
    EpisodeDetail,
    EpisodePage,
    NotFound,
    ViewError,
    detail_of,
    list_page,
    page_bounds,
    parse_filter,
)
from searchrl.view.page import export_page, render_page, served_policy
from searchrl.view.store import RunStore, Snapshot
from searchrl.view.summary import RunSummary, StepSummary

TOKEN_ENV = "SEARCHRL_VIEW_TOKEN"
DEFAULT_REFRESH_S = 5.0
# The page is served without a token (it holds no data; it asks for the token and sends it to the API).
OPEN_PATHS = ("/", "/health")
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "a filter that is not one (`field` names the parameter)"},
    401: {"model": ErrorBody, "description": "missing or wrong bearer token (only when the server has one)"},
    404: {"model": ErrorBody, "description": "no such episode or step in the run"},
}


def _steps_text(snapshot: Snapshot) -> str:
    steps = snapshot.summary.steps
    return f"the run has steps {steps[0]} to {steps[-1]}" if steps else "the run has no episodes yet"


def _episodes(snapshot: Snapshot, params: dict[str, str | None]) -> EpisodePage:
    chosen = parse_filter(params, snapshot)
    limit, offset = page_bounds(params.get("limit"), params.get("offset"))
    if chosen.step is not None and chosen.step not in snapshot.by_step:
        raise NotFound("step", f"{chosen.step} is not a step with episodes ({_steps_text(snapshot)})")
    return list_page(snapshot, chosen, limit, offset)


def _episode(snapshot: Snapshot, episode_id: str) -> EpisodeDetail:
    record = snapshot.by_id.get(episode_id)
    if record is None:
        raise NotFound("id", f"no episode {episode_id[:80]!r} in {snapshot.run.run_dir} (ids come from /api/episodes)")
    return detail_of(record)


def _store(request: Request) -> RunStore:
    return request.app.state.store


# The JSON API: every route reads the run through the store its app's lifespan holds, in the thread pool.
api = APIRouter(prefix="/api", responses=ERRORS)


@api.get("/summary", response_model=RunSummary)
async def summary(request: Request) -> RunSummary:
    return (await run_in_threadpool(_store(request).snapshot)).summary


@api.get("/step/{step}", response_model=StepSummary)
async def step_summary(request: Request, step: int) -> StepSummary:
    snapshot = await run_in_threadpool(_store(request).snapshot)
    if step not in snapshot.by_step:
        raise NotFound("step", f"{step} is not a step with episodes ({_steps_text(snapshot)})")
    return snapshot.by_step[step]


# The parameters are read as text and parsed by listing.parse_filter (a bad one is a 400 naming it); they are
# declared here for the OpenAPI schema.
@api.get("/episodes", response_model=EpisodePage)
async def episodes(
    request: Request,
    step: str | None = Query(None, description="a step (all steps without it)"),
    min_reward: str | None = Query(None, description="reward at least this"),
    max_reward: str | None = Query(None, description="reward at most this"),
    violation: str | None = Query(None, description="a rule's name, `any` (broke some rule) or `none`"),
    searches: str | None = Query(None, description="searches: exactly `2`, or `2+` for two or more"),
    correct: str | None = Query(
        None, description="`right` or `wrong`: em > 0 (cem without em, the score without either)"
    ),
    q: str | None = Query(None, description="text in the prompt, solution or answer (any case)"),
    sort: str | None = Query(None, description="time, reward, -reward, searches or -searches"),
    limit: str | None = Query(None, description="1 to 500 (50)"),
    offset: str | None = Query(None),
) -> EpisodePage:
    params = dict(request.query_params)
    store = _store(request)
    return await run_in_threadpool(lambda: _episodes(store.snapshot(), params))


@api.get("/episode/{episode_id}", response_model=EpisodeDetail)
async def episode(request: Request, episode_id: str) -> EpisodeDetail:
    store = _store(request)
    return await run_in_threadpool(lambda: _episode(store.snapshot(), episode_id))


async def _refused(request: Request, exc: Exception) -> JSONResponse:
    refused = cast(ViewError, exc)
    return error_response(refused.status, refused.field, refused.message)


def create_app(
    run_dir: Path,
    token: SecretStr | str | None = None,
    refresh_s: float = DEFAULT_REFRESH_S,
    allowed_hosts: Iterable[str] = (),
    store: RunStore | None = None,
) -> FastAPI:
    """The viewer over `run_dir`; `store` reuses a run already read (the command line checks it has episodes)."""
    run_dir = Path(run_dir)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        held = store or RunStore(run_dir, min_check_s=min(1.0, refresh_s / 2))
        await run_in_threadpool(held.snapshot)
        app.state.store = held
        yield

    # No /docs: FastAPI's docs page loads its script from a CDN, and the viewer works offline.
    app = FastAPI(title="searchrl view", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_middleware(
        RequestGuard,
        max_bytes=1024,
        token=token,
        open_paths=OPEN_PATHS,
        allowed_hosts=allowed_hosts,
        routes=app.router,
    )
    app.add_exception_handler(ViewError, _refused)
    app.include_router(api)
    page_headers = {"Content-Security-Policy": served_policy(), "Cache-Control": "no-store"}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(render_page(run_dir.name or str(run_dir), refresh_s), headers=page_headers)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


@contextmanager
def serve_in_thread(app: FastAPI, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 60.0) -> Iterator[str]:
    """The app on a uvicorn server in a thread of this process (the browser check's); yields its base URL."""
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the viewer did not start on {host}:{port}")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def no_episodes_message(run_dir: Path) -> str:
    return (
        f"{run_dir}: no episode records (looked for {run_dir}/**/{EPISODES_DIR}/*.jsonl). A run writes them when "
        "its stage config keeps some per step: set `episodes.per_step` (e.g. the override episodes.per_step=8) "
        "and run the stage again, or give the folder of a run that did."
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="searchrl view",
        description="A run's episodes and curves in the browser: filter episodes, read one turn by turn, compare "
        "two steps. The page refreshes while the run writes.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run's folder (its episodes under **/episodes/)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=0, help="port (default: 0, a free one)")
    p.add_argument(
        "--token-env",
        default=None,
        metavar="NAME",
        help=f"require the bearer token in this environment variable (default: ${TOKEN_ENV} when set)",
    )
    p.add_argument(
        "--refresh", type=float, default=DEFAULT_REFRESH_S, help="seconds between the page's re-reads (0: never)"
    )
    p.add_argument("--export", type=Path, metavar="FILE.html", help="write one self-contained page and exit")
    return p


def _token(name: str | None) -> str | None:
    if name is not None and not os.environ.get(name):
        raise ValueError(f"--token-env {name}: ${name} is not set (or is empty)")
    return server_token(None, name or TOKEN_ENV)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run_dir: Path = args.run_dir
    if not run_dir.is_dir():
        print(f"error: {run_dir}: no such folder (give a run's folder, e.g. runs/stage1_format)", file=sys.stderr)
        return 2
    if args.refresh < 0:
        print("error: --refresh must be 0 or more seconds", file=sys.stderr)
        return 2
    store = RunStore(run_dir, min_check_s=min(1.0, args.refresh / 2))
    snapshot = store.snapshot()
    if not snapshot.episodes:
        print(f"error: {no_episodes_message(run_dir)}", file=sys.stderr)
        return 2
    if args.export is not None:
        args.export.parent.mkdir(parents=True, exist_ok=True)
        args.export.write_text(export_page(snapshot), encoding="utf-8")
        print(f"wrote {args.export} ({len(snapshot.episodes)} episodes, {len(snapshot.summary.steps)} steps)")
        return 0
    try:
        token = _token(args.token_env)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    port = args.port or free_port()
    app = create_app(run_dir, token, args.refresh, allowed_hosts=(args.host,), store=store)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    steps = snapshot.summary.steps
    print(f"searchrl view: http://{shown}:{port}/", flush=True)
    print(f"  {len(snapshot.episodes)} episodes, steps {steps[0]}-{steps[-1]}; Ctrl-C stops", flush=True)
    if token:
        print("  the page asks for the bearer token (or open the URL with #token=<token>)", flush=True)
    elif args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"  warning: no token, and {args.host} is not loopback: whoever reaches the port reads the run", flush=True
        )
    uvicorn.run(app, host=args.host, port=port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
