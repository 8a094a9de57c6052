"""GMTRouter: log validation, the personalised router (the paper's HGT model by default) beating its baselines
on held-out synthetic users, its checkpoint (safetensors + JSON, no pickle), its use as the router backend's
policy, and the SAGE baseline. The paper's mechanisms one by one: test_gmtrouter_paper.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from datetime import UTC, datetime
from pathlib import Path

import pytest

from searchrl.rollout.search_step import open_search_step
from searchrl.routing.gmtrouter.__main__ import main
from searchrl.routing.gmtrouter.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from searchrl.routing.gmtrouter.data import LogError, read_logs, sessions_of
from searchrl.routing.gmtrouter.evaluate import heldout_experiment
from searchrl.routing.gmtrouter.graph import UserHistory
from searchrl.routing.gmtrouter.policy import GMTRouterPolicy, GMTRouterPolicyConfig, PersonalRouter
from searchrl.routing.gmtrouter.synthetic import MODELS
from searchrl.routing.gmtrouter.train import TrainConfig
from searchrl.stage.search import StageSearchConfig
from tests.conftest import serve
from tests.fakes_web import FakeControl, chat_app

# The claim the docs make: on held-out data the personalised router orders users' rated pairs better
# than both baselines by at least this much accuracy (measured margins: docs/BENCHMARKS.md, GMTRouter).
MARGIN = 0.03
SEEN, NEW, SEED = 60, 25, 0
# The paper's model, narrower, with every rated pair in each step and a higher learning rate, so that it
# learns in 250 steps instead of 350. Width 32 at 2e-3 for 150 steps sat on the edge of the jump where the user
# states start to help: whether it got there flipped with float rounding alone (CPU kernels), and seeds 1 and 2
# missed the margin; width 64 at 1e-3 for 250 steps clears it for seeds 0-2, rounding changed or not.
SMALL_HGT = TrainConfig(hidden=64, epochs=250, lr=1e-3, prediction_count=100_000, eval_every=10, seed=SEED)


def line(user_id="u1", **inter):
    base = {"query": "q", "model_used": "atlas", "user_feedback": 0.5, "timestamp": "2025-01-01T10:00:00Z"}
    return json.dumps({"user_id": user_id, "interactions": [{**base, **inter}]})


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("inter", "needle"),
    [
        ({"user_feedback": 1.5}, "line 2: field interactions.0.user_feedback: .*fix: a rating in \\[0, 1\\]"),
        ({"user_feedback": True}, "line 2: field interactions.0.user_feedback: .*boolean.*1/0"),
        ({"timestamp": "yesterday"}, "line 2: field interactions.0.timestamp: .*not ISO 8601.*epoch seconds"),
        ({"model_used": "gpt-9"}, "line 2: field interactions.0.model_used: unknown model 'gpt-9'.*one of"),
        ({"query": ""}, "line 2: field interactions.0.query"),
        ({"rating": 1}, "line 2: field interactions.0.rating: .*fix: remove it"),
    ],
)
def test_a_bad_log_line_names_its_line_field_and_fix(tmp_path, inter, needle):
    path = write(tmp_path, line("ok"), line("bad", **inter))
    with pytest.raises(LogError, match=needle):
        read_logs(path, models=MODELS)


def test_duplicate_users_and_non_json_lines_are_refused(tmp_path):
    with pytest.raises(LogError, match="line 2: field user_id: 'u1' already on line 1; fix: merge"):
        read_logs(write(tmp_path, line("u1"), line("u1")))
    with pytest.raises(LogError, match="line 1: not a JSON object"):
        read_logs(write(tmp_path, "[1, 2]"))


def test_epoch_and_iso_times_agree_and_a_long_gap_starts_a_session(tmp_path):
    t0 = datetime(2025, 1, 1, 10, tzinfo=UTC).timestamp()
    inters = [
        {"query": "a", "model_used": "atlas", "user_feedback": 1, "timestamp": t0 + 120},
        {"query": "a", "model_used": "bolt", "user_feedback": 0, "timestamp": "2025-01-01T10:00:00Z"},
        {"query": "b", "model_used": "bolt", "user_feedback": 0.5, "timestamp": "2025-01-01T11:00:00+00:00"},
    ]
    path = write(tmp_path, json.dumps({"user_id": "u", "interactions": inters}))
    (user,) = read_logs(path, models=MODELS)
    assert [i.model_used for i in user.interactions] == ["bolt", "atlas", "bolt"]
    assert [len(s.interactions) for s in sessions_of(user, gap_minutes=30)] == [2, 1]
    assert [len(s.interactions) for s in sessions_of(user, gap_minutes=90)] == [3]


def test_sessions_named_in_the_log_delimit_sessions_and_naming_some_only_is_refused(tmp_path):
    inters = [
        {"query": "a", "model_used": "atlas", "user_feedback": 1, "timestamp": 0, "session": "s1"},
        {"query": "b", "model_used": "bolt", "user_feedback": 0, "timestamp": 7200, "session": "s1"},
        {"query": "c", "model_used": "bolt", "user_feedback": 0, "timestamp": 7260, "session": "s2"},
    ]
    (user,) = read_logs(write(tmp_path, json.dumps({"user_id": "u", "interactions": inters})))
    # Two hours apart yet one session; a minute apart yet two: the ids decide, not the gap.
    assert [[i.query for i in s.interactions] for s in sessions_of(user, gap_minutes=30)] == [["a", "b"], ["c"]]
    del inters[2]["session"]
    with pytest.raises(LogError, match="field interactions: .*interaction 2 names no session.*fix: give every"):
        read_logs(write(tmp_path, json.dumps({"user_id": "u", "interactions": inters})))


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    out = tmp_path_factory.mktemp("gmtrouter") / "ckpt"
    report = heldout_experiment(SEEN, NEW, SEED, SMALL_HGT, out)
    return out, report


@pytest.mark.parametrize("split", ["seen_users_later_sessions", "new_users"])
def test_personalised_router_beats_popularity_and_non_personalised_on_held_out_users(experiment, split):
    overall = experiment[1][split]["overall"]
    mine = overall["personalised"]
    assert mine["pairs"] > 300
    for base in ("popularity", "non_personalised"):
        assert mine["accuracy"] >= overall[base]["accuracy"] + MARGIN, (split, base, overall)
        assert mine["auc"] > overall[base]["auc"] and mine["ndcg@3"] > overall[base]["ndcg@3"], (split, base, overall)


def test_checkpoint_is_safetensors_and_json_and_round_trips(experiment, tmp_path):
    out, _ = experiment
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "nonpersonal.safetensors", "history.jsonl"} <= names
    assert not {n for n in names if n.endswith((".pt", ".pkl", ".bin", ".pth"))}
    for weights in ("model.safetensors", "nonpersonal.safetensors"):
        raw = (out / weights).read_bytes()
        header = json.loads(raw[8 : 8 + struct.unpack("<Q", raw[:8])[0]])
        assert json.loads(header["__metadata__"]["models"]) == MODELS and header["__metadata__"]["kind"] == "hgt"
    config = json.loads((out / "config.json").read_text())
    assert config["models"] == MODELS and config["format"] == "searchrl-gmtrouter/2" and config["kind"] == "hgt"

    # Save what was loaded, load it again: the same weights, hence the same routing.
    nets = {p: load_checkpoint(out, personalised=p) for p in (True, False)}
    again = tmp_path / "again"
    save_checkpoint(again, nets[True].config, nets)
    reloaded = load_checkpoint(again)
    for (ka, va), (kb, vb) in zip(nets[True].state_dict().items(), reloaded.state_dict().items(), strict=True):
        assert ka == kb and bool((va == vb).all())
    history = read_logs(out / "history.jsonl")[:5]
    scored = []
    for directory in (out, again):
        router = PersonalRouter.load(directory)
        hist = [UserHistory(u.user_id, sessions_of(u), u.preferred_models) for u in history]
        scored.append(router.scores(router.user_states(hist), range(5), ["How do I make risotto?"] * 5))
    assert (scored[0] == scored[1]).all()

    # A config whose vocabulary disagrees with the weights' is refused, naming both files.
    config["models"] = list(reversed(MODELS))
    (again / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="model vocabulary .* differs"):
        load_checkpoint(again)


def answer_as(name):
    return lambda messages: f"{name}: {messages[-1]['content']}"


def test_the_router_backend_asks_the_policy_for_queries_naming_no_model(experiment):
    out, _ = experiment
    history = read_logs(out / "history.jsonl")
    policy = GMTRouterPolicy.from_config(GMTRouterPolicyConfig(checkpoint=out), pool=MODELS)
    question = "How do I make risotto?"
    picks = policy.choose([(u.user_id, question) for u in history], MODELS)
    # Personalised: users of different tastes are sent to different models for the same question.
    first = history[0].user_id
    other = next(u.user_id for u, p in zip(history, picks, strict=True) if p != picks[0])

    controls = {m: FakeControl(api_key=None) for m in MODELS}
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(serve(chat_app(controls[m], answer_as(m)))) for m in MODELS]
        pool = [{"name": m, "base_url": f"{u}/v1", "model": m} for m, u in zip(MODELS, urls, strict=True)]
        policy_cfg = {"checkpoint": str(out), "user": first}
        backend = open_search_step(
            StageSearchConfig.model_validate({"backend": "router", "router": {"models": pool, "policy": policy_cfg}})
        )

        async def run():
            try:
                return await backend.search(
                    [
                        f"auto@{first}: {question}",
                        f"auto@{other}: {question}",
                        f"auto: {question}",
                        question,
                        f"{MODELS[4]}: {question}",
                    ],
                    1,
                )
            finally:
                await backend.aclose()

        results = asyncio.run(run())
    chosen = [r[0].title for r in results]
    assert chosen[0] == picks[0] and chosen[1] != picks[0]
    assert chosen[2] == chosen[3] == picks[0]  # no user named: the configured default user
    assert chosen[4] == MODELS[4]  # a named model is never overridden
    assert all(r[0].text == f"{r[0].title}: {question}" for r in results)  # the prefix is stripped
    assert sum(c.calls for c in controls.values()) == 5


def test_a_pool_model_unknown_to_the_checkpoint_is_routed_to_by_its_description(experiment):
    out, _ = experiment
    cfg = GMTRouterPolicyConfig(checkpoint=out, descriptions={"fable": "atlas"})
    policy = GMTRouterPolicy.from_config(cfg, pool=["fable", "bolt"])
    assert policy.router.models[-1] == "fable"
    assert set(policy.choose([(None, "How do I make risotto?"), (None, "Solve 3x + 7 = 22 for x")], ["fable", "bolt"]))
    assert policy.choose([(None, "q")], ["fable"]) == ["fable"]


@pytest.mark.parametrize("model", ["hgt", "sage"])
def test_commands_synthesize_train_evaluate(tmp_path, capsys, model):
    logs, ckpt = tmp_path / "users.jsonl", tmp_path / "ckpt"
    assert main(["synthesize", "--users", "12", "--out", str(logs), "--seed", "3"]) == 0
    assert main(["train", "--logs", str(logs), "--out", str(ckpt), "--epochs", "2", "--model", model]) == 0
    assert json.loads((ckpt / "config.json").read_text())["kind"] == model
    assert main(["evaluate", "--checkpoint", str(ckpt), "--logs", str(logs), "--context-sessions", "4"]) == 0
    report = json.loads((ckpt / "evaluation.json").read_text())
    assert set(report["overall"]) == {"personalised", "non_personalised", "popularity"}
    assert report["seen_users"] == 12 and len(report["per_user"]) == 12
    if model == "sage":
        # The baseline knows models by ID: a pool naming none of them is refused, a new one cannot be added.
        with pytest.raises(ValueError, match="search.router.policy.checkpoint: .*none of them in the pool"):
            GMTRouterPolicy.from_config(GMTRouterPolicyConfig(checkpoint=ckpt), pool=["other"])
        with pytest.raises(ValueError, match="not in the checkpoint's vocabulary .* retrain"):
            PersonalRouter.load(ckpt).add_models({"other": "a new model"})
        # A checkpoint written before the HGT model (format 1, no kind) still loads, as the SAGE one it is.
        config = json.loads((ckpt / "config.json").read_text())
        del config["kind"], config["llm_texts"], config["temporal"], config["heads"], config["selection"]
        del config["scorer_hidden"], config["dropout"]
        (ckpt / "config.json").write_text(json.dumps(config | {"format": "searchrl-gmtrouter/1"}))
        assert load_checkpoint(ckpt).config.kind == "sage"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line(user_feedback=7) + "\n")
    assert main(["train", "--logs", str(bad), "--out", str(tmp_path / "x")]) == 2
    assert "line 1: field interactions.0.user_feedback" in capsys.readouterr().err
