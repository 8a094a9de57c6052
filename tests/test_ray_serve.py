"""The servers as Ray Serve applications (searchrl/ray_serve.py, launch/ray_servers.py), in the parts that run
without a Ray cluster: the placement as Serve's options, what each replica builds (the plain server's app from its
own command line, run here with its lifespan), the health check, Serve's state read from its REST answer (recorded
from Ray 2.55's dashboard), and `servers start` refusing Serve-only flags without `--engine ray`. The deployments
themselves run on a two-node cluster with replicas killed in CI (searchrl/rehearsal/serve_faults.py)."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from launch import servers
from reward_server import ray_deployment as reward_deployment
from search_backend.serve import ray_deployment as retrieval_deployment
from searchrl.ray_serve import Placement, app_state, asgi_health, replicas
from searchrl.stage.config import load_stage, stage_config_file
from tests.conftest import FIXTURES

# GET /api/serve/applications/ as Ray 2.55's dashboard answered it in the two-node rehearsal, trimmed to the fields
# read here (a retrieval replica on each node, both reward replicas on the head).
APPS = json.loads((FIXTURES / "serve_applications.json").read_text())["applications"]


def test_fixed_placement_is_a_replica_count() -> None:
    options = Placement(replicas=2, num_cpus=2, max_replicas_per_node=1).deployment_options()
    assert options["num_replicas"] == 2 and "autoscaling_config" not in options
    assert options["ray_actor_options"] == {"num_cpus": 2, "num_gpus": 0.0}
    assert options["max_replicas_per_node"] == 1
    # Serve's default of 5 would queue training's searches in the proxy, in front of the server's own batching.
    assert options["max_ongoing_requests"] == 4096


def test_bounds_autoscale_and_resources_place() -> None:
    options = Placement(replicas=1, max_replicas=4, num_gpus=0.1, resources={"index": 1}).deployment_options()
    assert "num_replicas" not in options
    assert options["autoscaling_config"] == {
        "min_replicas": 1,
        "initial_replicas": 1,
        "max_replicas": 4,
        "target_ongoing_requests": 64,
    }
    assert options["ray_actor_options"] == {"num_cpus": 1.0, "num_gpus": 0.1, "resources": {"index": 1}}
    with pytest.raises(ValidationError, match="max_replicas"):
        Placement(replicas=3, max_replicas=2)


def test_app_state_reads_serve_rest_answer() -> None:
    ok, said = app_state(APPS, "searchrl-retrieval")
    assert ok and said == "RUNNING: retrieval HEALTHY, 2 of 2 replicas running"
    assert len({r["node_id"] for r in replicas(APPS["searchrl-retrieval"])}) == 2
    assert len({r["node_id"] for r in replicas(APPS["searchrl-reward"])}) == 1
    assert app_state(APPS, "searchrl-other") == (False, "not deployed")
    # One replica dead and not yet replaced: not ready.
    broken = json.loads(json.dumps(APPS))
    deployment = broken["searchrl-reward"]["deployments"]["reward"]
    deployment["replicas"][0]["state"] = "STARTING"
    deployment["status"] = "UPDATING"
    ok, said = app_state(broken, "searchrl-reward")
    assert not ok and "1 of 2 replicas running" in said


def test_retrieval_replica_builds_the_plain_server(mini_index) -> None:
    build = retrieval_deployment.builder(["--index", str(mini_index), "--threads", "1"])
    app = build()
    assert isinstance(app, FastAPI)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        assert client.get("/health").json()["manifest"]["passages"] > 0
        hits = client.post("/search", json={"queries": ["capital of France"], "top_k": 2}).json()["results"]
        assert len(hits) == 1 and len(hits[0]) == 2
        asyncio.run(asgi_health(app))


def test_reward_replica_scores_the_stage_reward(tmp_path) -> None:
    stage, _ = load_stage(stage_config_file("stage2"), [])
    log = tmp_path / "scores.jsonl"
    app = reward_deployment.builder(["--log-jsonl", str(log)], stage.model_dump_json())()
    with TestClient(app, base_url="http://127.0.0.1") as client:
        assert stage.reward.differing_components(client.get("/health").json()["spec"]) == []
        body = {
            "query": ["Q <|begin_of_query|> x <|end_of_query|> docs </think> <answer> Paris </answer>"],
            "prompts": ["Q"],
            "labels": ["Paris"],
        }
        answer = client.post("/get_reward", json=body, headers={"Idempotency-Key": "k1"}).json()
        again = client.post("/get_reward", json=body, headers={"Idempotency-Key": "k1"}).json()
    assert answer == again and len(answer["rewards"]) == 1
    # The store beside the score log, which replicas share, answered the retry: one line.
    assert len(log.read_text().splitlines()) == 1
    assert log.with_name(log.name + ".keys.sqlite").is_file()


def test_health_check_raises_when_health_fails() -> None:
    app = FastAPI()

    @app.get("/health")
    def health() -> dict:
        raise RuntimeError("index gone")

    with pytest.raises(RuntimeError, match="500"):
        asyncio.run(asgi_health(app))


def test_plain_engine_refuses_serve_flags(mini_index, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        servers.start(["--index", str(mini_index), "--replicas", "2"])
    assert exited.value.code == 2
    assert "--replicas: only with --engine ray" in capsys.readouterr().err
