"""The project's servers as Ray Serve applications: one deployment per server, its replicas placed by Ray
resources, health-checked through the app's own `GET /health`, and read back from Serve's REST API.

The app a replica runs is the plain server's `create_app`, built in the replica from the server's own command
line (so the settings, the token and the lifespan that owns the index are the plain server's); Serve adds the
replicas, their restarts and their scaling, and its proxy on every node is the address the clients are given.
Ray is imported only when a deployment is made: the base install has no Ray.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

# The one Ray namespace the deployments' driver connects in, so `servers stop` finds what `servers start` made.
NAMESPACE = "searchrl"
HEAD_NODE = "node:__internal_head__"
# The Serve application of each server, by server name (`servers start --engine ray` deploys them).
APPS = {"retrieval": "searchrl-retrieval", "reward": "searchrl-reward"}


class Placement(BaseModel):
    """How many replicas of one server, where, and how much each holds."""

    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(default=1, ge=1, description="replicas at start, and the fewest when autoscaling")
    max_replicas: int | None = Field(
        default=None, ge=1, description="autoscale between `replicas` and this with load (None: a fixed count)"
    )
    # Requests in flight a replica holds before the autoscaler adds one; near the batcher's batch (64) so a replica
    # fills its batches before another starts.
    target_ongoing_requests: float = Field(default=64, gt=0)
    # Serve's default (5) would queue a training run's ~1,000 in-flight searches in the proxy and defeat the
    # server's own batching: a replica takes as many as its server's --max-concurrency would.
    max_ongoing_requests: int = Field(default=4096, ge=1)
    num_cpus: float = Field(default=1.0, ge=0)
    num_gpus: float = Field(default=0.0, ge=0, description="a fraction shares a GPU with a vLLM engine")
    max_replicas_per_node: int | None = Field(default=None, ge=1, description="1: at most one replica a node")
    resources: dict[str, float] = Field(default_factory=dict, description="custom Ray resources each replica needs")

    @model_validator(mode="after")
    def _bounds(self) -> Placement:
        if self.max_replicas is not None and self.max_replicas < self.replicas:
            raise ValueError(f"max_replicas ({self.max_replicas}) is below replicas ({self.replicas})")
        return self

    def deployment_options(self) -> dict[str, Any]:
        """This placement as `serve.deployment`'s keyword arguments."""
        actor: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.resources:
            actor["resources"] = dict(self.resources)
        options: dict[str, Any] = {
            "ray_actor_options": actor,
            "max_ongoing_requests": self.max_ongoing_requests,
            "health_check_period_s": 5.0,
            "health_check_timeout_s": 30.0,
        }
        if self.max_replicas_per_node is not None:
            options["max_replicas_per_node"] = self.max_replicas_per_node
        if self.max_replicas is None or self.max_replicas == self.replicas:
            options["num_replicas"] = self.replicas
        else:
            options["autoscaling_config"] = {
                "min_replicas": self.replicas,
                "initial_replicas": self.replicas,
                "max_replicas": self.max_replicas,
                "target_ongoing_requests": self.target_ongoing_requests,
            }
        return options


async def asgi_health(app: Any) -> None:
    """The app's own `GET /health` called in the replica; anything but 200 raises, and Serve replaces the replica."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        reply = await client.get("/health", timeout=20.0)
    if reply.status_code != 200:
        raise RuntimeError(f"GET /health answered {reply.status_code}: {reply.text[:200]}")


def application(name: str, build: Callable[[], Any], placement: Placement) -> Any:
    """A bound Serve application of one deployment running the ASGI app `build` returns (called in each replica,
    where its lifespan then runs)."""
    from ray import serve

    @serve.deployment(name=name, **placement.deployment_options())
    @serve.ingress(build)
    class Server:
        async def check_health(self) -> None:
            await asgi_health(self.app)

    return Server.bind()


def applications(dashboard: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Serve's applications as its REST API on the dashboard reports them (empty when Serve is not running)."""
    reply = httpx.get(f"{dashboard.rstrip('/')}/api/serve/applications/", timeout=timeout_s)
    reply.raise_for_status()
    return reply.json().get("applications") or {}


def replicas(app: dict[str, Any]) -> list[dict[str, Any]]:
    """Every replica of an application's deployments, as Serve reports them (state, pid, node_id, actor_id)."""
    return [r for d in (app.get("deployments") or {}).values() for r in d.get("replicas") or []]


def app_state(apps: dict[str, Any], name: str) -> tuple[bool, str]:
    """Whether application `name` is running with every deployment at its target count of running replicas, and
    what Serve says of it."""
    app = apps.get(name)
    if app is None:
        return False, "not deployed"
    deployments = app.get("deployments") or {}
    parts, ok = [], app.get("status") == "RUNNING" and bool(deployments)
    for dname, d in deployments.items():
        running = sum(r.get("state") == "RUNNING" for r in d.get("replicas") or [])
        target = d.get("target_num_replicas")
        ok = ok and d.get("status") == "HEALTHY" and target is not None and running >= target
        parts.append(f"{dname} {d.get('status')}, {running} of {target} replicas running")
    return ok, f"{app.get('status')}: " + "; ".join(parts or ["no deployment"])
