"""Router-R1 end to end on CPU: its data, its stage through the real agent against a loopback pool, the
submission (dry-run parsed by OpenRLHF's parser, the rehearsal through `ray job submit`), and the routing
evaluation against its fixed baselines in one run."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys

import pytest

from eval import routing
from reward_server.app import ServerSettings
from reward_server.app import create_app as create_reward_app
from searchrl.jsonl import RecordError
from searchrl.protocols import router_r1
from searchrl.rehearsal.job import ReplayVllmEngine
from searchrl.rollout.agent import Runtime, load_agent_executor
from searchrl.rollout.engines import SamplingParams
from searchrl.routing.loopback_pool import create_app as create_pool_app
from searchrl.routing.loopback_pool import repoint, skills_by_price
from searchrl.routing.routed_recordings import by_price, route_trajectory
from searchrl.stage.config import load_stage
from searchrl.stage.openrlhf_flags import check_args, validated_args
from searchrl.stage.templates import effective_model, load_tokenizer, render_prompt
from searchrl.tiny_policy.model import build_tokenizer
from stage_router_r1.data import read_router_records
from tests.conftest import ROOT, serve

CONFIG = ROOT / "configs/stages/router_r1.yaml"
SAMPLE = ROOT / "examples/bamboogle_llama_sample.jsonl"
QUESTION = "Who carried out the 2009 Fort Hood shooting?"
POOL = [
    "Qwen2.5-7B-Instruct",
    "LLaMA-3.1-8B-Instruct",
    "LLaMA-3.1-70B-Instruct",
    "Mistral-7B-Instruct",
    "Mixtral-8x22B-Instruct",
    "Gemma-2-27B-Instruct",
]
# Router-R1's shape in its tags: think, route (written the way a policy may spell the name), the reply, think again.
TRAJECTORY = (
    "<think> I should ask a model. </think>\n"
    "<search> llama-3.1-8b: 2009 Fort Hood shooting perpetrator </search>"
    "\n\n<information>recorded</information>\n\n"
    "<think> The model names him. </think>\n<answer> Nidal Hasan </answer>"
)


def record(**changes):
    base = {
        "query": "Who wrote Hamlet?",
        "query_type": "nq",
        "candidate_models": [
            {"name": "LLaMA-3.1-8B-Instruct", "cost": 0.1, "latency": 0.5},
            {"name": "Mixtral-8x22B-Instruct", "cost": 1, "latency": 2},
        ],
        "ground_truth": "William Shakespeare",
        "optimal_model": "LLaMA-3.1-8B-Instruct",
    }
    return {**base, **changes}


def test_router_records_are_validated_naming_line_and_field(tmp_path):
    stage, _ = load_stage(CONFIG)
    good = tmp_path / "good.json"
    good.write_text(json.dumps([record(), record(query="Capital of France?", ground_truth=["Paris"])]))
    assert [r.query for r in read_router_records(good, stage.search.router)] == [
        "Who wrote Hamlet?",
        "Capital of France?",
    ]
    bad = tmp_path / "bad.jsonl"
    rows = [
        record(),
        record(candidate_models=[{"name": "small", "cost": "cheap", "latency": 1}]),
        record(optimal_model="medium"),
        {k: v for k, v in record().items() if k != "ground_truth"},
        record(candidate_models=[{"name": "gpt-9", "cost": 1, "latency": 1}], optimal_model=None),
    ]
    bad.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(RecordError) as err:
        read_router_records(bad, stage.search.router)
    text = str(err.value)
    assert f"{bad}:2: candidate_models.0.cost: Input should be a valid number" in text
    assert f"{bad}:3: (record): optimal_model 'medium' is not among candidate_models" in text
    assert f"{bad}:4: ground_truth: Field required" in text
    assert f"{bad}:5: candidate_models.0.name: 'gpt-9' is not in the stage's pool" in text
    assert ":1:" not in text


def prepare(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "stage_router_r1.prepare_data", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_prepare_mixes_bundled_sets_and_router_records(tmp_path, chat_model):
    rr = tmp_path / "router.jsonl"
    rr.write_text(json.dumps(record()) + "\n")
    out, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    done = prepare("--mix", "stage1=30", "--mix", "bamboogle=10", "--input", str(rr), "--out", str(out),
                   "--test-out", str(test), "--test-size", "8", "--model", str(chat_model))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.with_suffix(".report.json").read_text())
    train_rows = [json.loads(line) for line in out.read_text().splitlines()]
    test_rows = [json.loads(line) for line in test.read_text().splitlines()]
    assert len(test_rows) == 8 and report["test_written"] == 8
    assert len(train_rows) == report["written"] and sum(report["query_types"].values()) == len(train_rows)
    # Bamboogle is an evaluation set: its questions are dropped from training, kept in the test split.
    assert "bamboogle" not in report["query_types"] and report["leaked_into_eval_sets"].get("bamboogle", 0) >= 1
    assert not {r["question"] for r in train_rows} & {r["question"] for r in test_rows}
    row = train_rows[0]
    assert {"prompt", "label", "question", "query_type", "candidate_models", "optimal_model"} <= set(row)
    assert [c["name"] for c in row["candidate_models"]] == POOL
    # Router-R1's prompt: one user turn (no system message of ours: the template's default), the pool's names
    # and descriptions (no prices), think before every call, the placeholder to replace, its <search> and
    # <information> tags; nothing after the assistant marker (the policy opens its own <think>).
    prompt = row["prompt"]
    assert prompt.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n")
    assert f"one model from [{', '.join(POOL)}]" in prompt and "LLM-Name:Your-Query" in prompt
    assert "Gemma-2-27B-Instruct:\nGoogle's instruction-tuned" in prompt and "$" not in prompt
    assert "Before every consultation, reason inside <think>" in prompt
    assert "<search> LLM-Name:Your-Query </search>" in prompt and "between <information> and </information>" in prompt
    assert prompt.endswith(f"Question: {row['question']}<|im_end|>\n<|im_start|>assistant\n")
    bad = prepare("--mix", "stage1=ten", "--out", str(out), "--model", str(chat_model))
    assert bad.returncode == 2 and "--mix 'stage1=ten': N must be a positive count" in bad.stderr
    assert prepare("--help").returncode == 0


def test_optimal_model_is_the_cheapest_right_one(tmp_path, chat_model):
    qa = {f"Question number {i} about topic {i}?": [f"answer{i}"] for i in range(12)}
    stage, _ = load_stage(CONFIG)
    skills = skills_by_price(stage.search.router)
    with serve(create_pool_app(qa, skills)) as url:
        text = CONFIG.read_text().replace("http://127.0.0.1:8100/v1", f"{url}/v1")
        config = tmp_path / "router.yaml"
        config.write_text(text.replace("configs/models/", f"{ROOT}/configs/models/"))
        src = tmp_path / "qa.jsonl"
        src.write_text("".join(json.dumps({"question": q, "answer": a[0]}) + "\n" for q, a in qa.items()))
        out = tmp_path / "train.jsonl"
        done = prepare(
            "--config", str(config), "--input", str(src), "--out", str(out), "--label-optimal", "--metric", "em",
            "--model", str(chat_model),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    from searchrl.routing.loopback_pool import CannedPool

    canned = CannedPool(qa, skills)
    order = by_price(stage.search.router)
    models = {m.name: m.model for m in stage.search.router.models}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        right = [n for n in order if canned.answer(models[n], row["question"]) == row["label"]]
        assert row["optimal_model"] == (right[0] if right else None)


def test_router_episode_through_the_agent_charges_the_pool(tmp_path, chat_model):
    """The stage's agent file in OpenRLHF's loop: the query, its name matched the way Router-R1 matches it,
    goes to that pool model in the original's framing, the answer comes back as the documents, and the
    reward is Router-R1's: (1 - c) * EM + c * cost reward (one episode so far: 0.5)."""
    qa = {QUESTION: ["Nidal Hasan"]}
    overrides = ["reward.cost_weight=0.5", f"model={chat_model}"]
    stage0, _ = load_stage(CONFIG, overrides)
    with serve(create_pool_app(qa, {m.model: 1.0 for m in stage0.search.router.models})) as pool_url:
        pool = repoint(stage0.search.router, f"{pool_url}/v1")
        models = json.dumps([m.model_dump() for m in pool.models])
        with serve(create_reward_app(ServerSettings(spec=stage0.reward))) as reward_url:
            stage, model_cfg = load_stage(
                CONFIG, [*overrides, f"search.router.models={models}", f"reward_server.urls={reward_url}"]
            )
            model = effective_model(model_cfg, stage)
            prompt = render_prompt(model, QUESTION, load_tokenizer(model), prompt_end=None)
            tokenizer = build_tokenizer([prompt, TRAJECTORY], vocab_size=800, protocol_tokens=False, qwen_split=True)

            async def run():
                runtime = Runtime.from_stage(stage)
                Runtime.install(runtime)
                try:
                    executor = load_agent_executor(ROOT / "stage_router_r1/agent_func.py")
                    engine = ReplayVllmEngine(tokenizer, {prompt: TRAJECTORY}, router_r1)
                    params = SamplingParams(temperature=1.0, top_p=0.95, max_tokens=None)
                    return await executor.execute(prompt, "Nidal Hasan", params, 4096, tokenizer, engine)
                finally:
                    Runtime.install(None)
                    await runtime.rewards.aclose()
                    await runtime.environment.search.aclose()

            result = asyncio.run(run())
    text = tokenizer.decode(result["observation_tokens"], skip_special_tokens=False)
    # The pool's answer, as Router-R1 appends it: the reply alone in <information>, with blank lines around.
    assert "</search>\n\n<information>Nidal Hasan</information>\n\n<think> The model names him." in text
    logs = {k: float(v) for k, v in result["extra_logs"].items()}
    assert logs["format_ok"] == 1.0 and logs["em"] == 1.0 and logs["cost_applies"] == 1.0
    assert logs["search_cost"] > 0 and logs["cost_reward"] == pytest.approx(0.5)
    assert float(result["reward"]) == pytest.approx(0.5 * 1.0 + 0.5 * 0.5)


def submit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "launch/ray_submit.sh", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def test_dry_run_renders_a_command_openrlhf_parses():
    out = submit("router_r1", "--dry-run", "openrlhf.rollout.batch_size=128")
    assert out.returncode == 0, out.stderr
    cmd = shlex.split(out.stdout.strip().splitlines()[-1])
    sep = cmd.index("--")
    ns = vars(check_args(cmd[sep + 4 :]))  # OpenRLHF 0.11.2's own parser
    assert ns["train.agent_func_path"] == "stage_router_r1/agent_func.py"
    # Router-R1's train.sh: PPO, GAE with a critic (OpenRLHF initialises it from the policy), Qwen2.5-3B-Instruct.
    assert ns["algo.advantage.estimator"] == "gae" and ns["rollout.batch_size"] == 128
    assert (ns["algo.advantage.gamma"], ns["algo.advantage.lambd"], ns["rollout.n_samples_per_prompt"]) == (1, 1, 1)
    assert (ns["actor.adam.lr"], ns["critic.adam.lr"], ns["algo.kl.init_coef"]) == (1e-6, 1e-5, 0.001)
    checked = validated_args(cmd[sep + 4 :])  # OpenRLHF's start-up: the critic starts from the policy, as in verl
    assert checked.critic.model_name_or_path == checked.actor.model_name_or_path == "Qwen/Qwen2.5-3B-Instruct"
    env = json.loads(cmd[cmd.index("--runtime-env-json") + 1])
    config = json.loads(env["env_vars"]["SEARCHRL_CONFIG_JSON"])
    assert config["stage"] == "router_r1" and config["search"]["backend"] == "router"
    assert config["reward"]["formula"] == "router_r1" and config["reward"]["cost_weight"] == 0.0
    assert [m["name"] for m in config["search"]["router"]["models"]] == POOL
    assert config["episode"]["max_searches"] == 4


def test_reinforce_plus_plus_is_the_named_alternative():
    out = submit("router_r1", "--dry-run", "algorithm=reinforce++", "openrlhf.actor.adam.lr=3e-6")
    assert out.returncode == 0, out.stderr
    cmd = shlex.split(out.stdout.strip().splitlines()[-1])
    ns = vars(check_args(cmd[cmd.index("--") + 4 :]))
    assert ns["algo.advantage.estimator"] == "reinforce_baseline" and ns["rollout.n_samples_per_prompt"] == 16
    assert validated_args(cmd[cmd.index("--") + 4 :]).critic.model_name_or_path is None  # no critic
    assert ns["actor.adam.lr"] == 3e-6  # the stage's own flag wins over the algorithm's


@pytest.mark.slow
def test_rehearsal_runs_the_job_against_a_loopback_pool():
    """`ray_submit.sh router_r1 --rehearse`: local Ray head, `ray job submit`, OpenRLHF's rollout and
    experience code, the agent routing to a loopback pool (about 2 minutes on 2 cores)."""
    out = submit("router_r1", "--rehearse", "--episodes", "4")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["ok"] and summary["scored"] == summary["episodes"] >= 4
    assert "loopback LLM pool" in out.stdout


def test_routing_evaluation_reports_policy_and_baselines_side_by_side(tmp_path):
    stage, _ = load_stage(CONFIG)
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    names = by_price(stage.search.router)
    recordings = tmp_path / "routed.jsonl"
    recordings.write_text(
        "".join(
            json.dumps({**r, "gen_text_store": route_trajectory(r["gen_text_store"], names, True, router_r1)}) + "\n"
            for r in rows
        )
    )
    data = tmp_path / "test.jsonl"
    data.write_text("".join(json.dumps({"question": r["question"], "answer": r["answer"]}) + "\n" for r in rows))
    out = tmp_path / "eval"
    code = routing.main(["--config", str(CONFIG), "--data", str(data), "--out", str(out), "--engine", "replay",
                         "--recordings", str(recordings), "--loopback"])  # fmt: skip
    assert code == 0
    result = json.loads((out / "routing.json").read_text())
    by = {p["name"]: p for p in result["policies"]}
    assert list(by) == [
        "policy (replay: replay-routed)",
        *(f"only {n}" for n in names),
        "random",
        "oracle (cheapest right model)",
    ]
    assert all(p["n"] == len(rows) for p in by.values())
    cheap, dear = by[f"only {names[0]}"], by[f"only {names[-1]}"]
    assert cheap["call_share"] == {n: float(n == names[0]) for n in POOL}
    assert sum(v > 0 for v in by["random"]["call_share"].values()) >= 4
    assert sum(by["random"]["call_share"].values()) == pytest.approx(1.0)
    for p in by.values():
        assert p["calls_per_question"] > 0 and p["cost_per_question"] > 0
    assert cheap["calls_per_question"] == dear["calls_per_question"] == 1.0
    assert cheap["cost_per_question"] < dear["cost_per_question"]
    assert dear["rr_em"] > cheap["rr_em"]  # the loopback pool's dearer model is right more often
    oracle = by["oracle (cheapest right model)"]
    assert oracle["rr_em"] >= max(p["rr_em"] for p in by.values() if p["name"].startswith("only "))
    # The policy's queries escalate from the cheapest model, as the routed recordings say.
    policy = by[next(iter(by))]
    assert policy["call_share"][names[0]] > 0 and policy["calls_per_question"] > 1
    assert abs(sum(policy["call_share"].values()) - 1.0) < 1e-9
    table = (out / "routing.md").read_text()
    assert (
        "| policy | n | EM (Router-R1) | F1 (Router-R1) | EM | F1 | CEM | cost / question | calls / question |"
        in table
    )
    assert f"| only {names[0]} | 24 |" in table
    assert (out / "routing.png").read_bytes()[:4] == b"\x89PNG"
    assert len((out / "records.jsonl").read_text().splitlines()) == (len(POOL) + 3) * len(rows)
