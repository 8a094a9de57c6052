"""The training rehearsal without running it (CI runs it: `.ci/run`): a real submit neither carries nor
activates the CPU layer, the rehearsal adds exactly that layer, the overrides pass OpenRLHF's own parser
and checks and keep the stage's ratios, the Ray head's ports cannot collide, the warm start's mixture
earns the stage-1 rewards it is documented to, and the SFT data masks the documents from the loss."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from searchrl.job import preflight, sft
from searchrl.job.plan import HOME_ONLY, plan_stage, ray_command, runtime_env
from searchrl.paths import EXAMPLES, ROOT
from searchrl.qa_data.sft_data import main as prepare_sft
from searchrl.qa_data.sft_data import trajectory_messages
from searchrl.rehearsal import cpu_layer, training
from searchrl.rehearsal.inputs import rehearsal_index, stage_questions
from searchrl.rehearsal.ray_head import (
    BLOCKS_DIR,
    RAY_NAMED_PORTS,
    WORKER_PORTS,
    RayHead,
    ephemeral_range,
    held_blocks,
    ray_ports,
    release_block,
)
from searchrl.rehearsal.training import step_clock, trainer_class
from searchrl.reward.scoring import score_solution
from searchrl.reward.spec import STAGE1_FORMAT
from searchrl.stage.openrlhf_flags import validated_args
from searchrl.tiny_policy import mixture

CPU_KEYS = {"py_modules", "worker_process_setup_hook"}


@pytest.mark.parametrize("stage", ["stage1", "stage2"])
def test_a_real_submit_neither_carries_nor_activates_the_cpu_layer(stage, tmp_path):
    plan = plan_stage(stage, None, ["init_from=null"])
    env = runtime_env(plan)
    assert not CPU_KEYS & set(env), env.keys()
    assert not [k for k in env["env_vars"] if k.startswith("SEARCHRL_CPU")]
    package = preflight.build_package(env, tmp_path / "package.zip")
    assert not [f for f in package.files if f.startswith("searchrl/rehearsal/cpu/")]
    assert not [f for f in package.files if f.startswith(("vllm/", "flash_attn/"))]
    assert any(f.startswith("searchrl/rollout/") for f in package.files)  # the package itself is the real one
    assert not [f for f in package.files if f.startswith(("searchrl/rehearsal/", "searchrl/tiny_policy/"))]
    # The job's entry is OpenRLHF's module itself, not the rehearsal's launcher.
    assert ray_command(plan, None, env)[-len(plan["train_args"]) - 3 :][:3] == [
        "python3",
        "-m",
        "openrlhf.cli.train_ppo_ray",
    ]


def test_the_rehearsal_adds_exactly_the_cpu_layer(tmp_path):
    plan = plan_stage("stage1", None, ["init_from=null"])
    env = runtime_env(plan)
    overrides = cpu_layer.cpu_overrides(plan["flags"], 1e-3)
    cpu = cpu_layer.runtime_env_with_cpu_layer(env, overrides, tmp_path / "sync.jsonl")
    assert set(cpu) - set(env) == CPU_KEYS
    assert {k: v for k, v in cpu.items() if k not in CPU_KEYS | {"env_vars", "excludes"}} == {
        k: v for k, v in env.items() if k not in ("env_vars", "excludes")
    }
    # The upload gains the rehearsal's own code (the layer included), and nothing else.
    assert set(env["excludes"]) - set(cpu["excludes"]) == set(cpu_layer.REHEARSAL_CODE) and set(cpu["excludes"]) < set(
        env["excludes"]
    )
    assert set(cpu_layer.REHEARSAL_CODE) < set(HOME_ONLY)
    package = preflight.build_package(cpu, tmp_path / "package.zip")
    assert "searchrl/rehearsal/cpu/launch.py" in package.files and "searchrl/rehearsal/job.py" in package.files
    assert not [f for f in package.files if f.startswith(("searchrl/job/", "searchrl/qa_data/"))]
    assert cpu["worker_process_setup_hook"] == "searchrl.rehearsal.cpu.activate"
    assert [Path(p).name for p in cpu["py_modules"]] == ["vllm", "flash_attn"]
    added = set(cpu["env_vars"]) - set(env["env_vars"])
    assert added == {cpu_layer.OVERRIDES_ENV, cpu_layer.SYNC_LOG_ENV}
    # OpenRLHF's train() calls ray.init with these env vars: Ray refuses a job env naming any of them.
    assert not {"TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS"} & set(cpu["env_vars"])
    assert all(cpu["env_vars"][k] == v for k, v in env["env_vars"].items())
    assert json.loads(cpu["env_vars"][cpu_layer.OVERRIDES_ENV])[0]["flag"] == "ds.attn_implementation"


@pytest.mark.parametrize("stage", ["stage1", "stage2"])
def test_the_overrides_pass_openrlhf_checks_and_keep_the_stage_layout(stage):
    plan = plan_stage(stage, None, ["init_from=null"])
    overrides = cpu_layer.cpu_overrides(plan["flags"], 1e-3)
    flags = {o.flag: o.value for o in overrides}
    cpu_plan = plan_stage(
        stage, None, ["init_from=null", *(f"openrlhf.{k}={json.dumps(v)}" for k, v in flags.items())]
    )
    args = validated_args(cpu_plan["train_args"])
    # OpenRLHF's own checks force flash-attention with packing: the override is re-applied after them.
    assert args.ds.attn_implementation == "flash_attention_2"
    assert args.ds.zero_stage == 3 and args.ds.packing_samples and args.train.colocate_all
    assert args.vllm.enable_sleep and args.ds.enable_sleep and args.actor.gradient_checkpointing_enable
    assert args.ds.param_dtype == "bf16" and args.vllm.sync_backend == "gloo"
    stage_ratio = plan["flags"]["rollout.batch_size"] * plan["flags"]["rollout.n_samples_per_prompt"]
    stage_ratio //= plan["flags"]["train.batch_size"]
    assert args.rollout.batch_size * args.rollout.n_samples_per_prompt // args.train.batch_size == stage_ratio
    assert all(o.reason for o in overrides)


def test_ray_ports_cannot_collide_by_construction():
    low, _ = ephemeral_range()
    for seed in range(200):
        ports = ray_ports(random.Random(seed), blocks=None)
        named = [ports[n] for n in RAY_NAMED_PORTS]
        workers = range(ports["min_worker"], ports["max_worker"] + 1)
        assert len(set(named)) == len(named)
        assert not set(named) & set(workers), seed
        assert max(*named, ports["max_worker"]) < low  # nothing the kernel hands out for port 0 lands there


def test_two_heads_never_share_a_port_block_and_a_dead_owners_block_is_reused(tmp_path):
    """Two heads started at once: the first head's worker ports are not bound yet, so only the record keeps the
    second (same random draw) off them. A block whose owner has exited is free again."""
    size = len(RAY_NAMED_PORTS) + WORKER_PORTS
    first = ray_ports(random.Random(7), blocks=tmp_path)
    second = ray_ports(random.Random(7), blocks=tmp_path)
    assert abs(first["gcs"] - second["gcs"]) >= size
    assert sorted(held_blocks(tmp_path)) == sorted([first["gcs"], second["gcs"]])
    release_block(first["gcs"], tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / str(second["gcs"])).write_text(dead.stdout.strip())
    assert held_blocks(tmp_path) == []
    assert ray_ports(random.Random(7), blocks=tmp_path)["gcs"] == first["gcs"]


def test_dynamic_filtering_gets_a_pool_of_prompts_to_replace_the_groups_it_drops():
    assert training.prompt_pool(plan_stage("stage2", None, [])["flags"]) == 1
    flags = plan_stage("stage2", None, ["openrlhf.algo.dynamic_filtering_enable=true"])["flags"]
    assert training.prompt_pool(flags) == training.DYNAMIC_FILTERING_POOL > 1


def test_warm_start_kinds_earn_their_documented_stage1_rewards():
    q = mixture.Question("Who wrote Dune?", "Frank Herbert", "wrote Dune")
    docs = ["Title: Dune Text: Dune is a novel by Frank Herbert."]
    want = {"correct": 1.0, "no_search": 0.5, "think_left_open": 0.5, "two_answers": 0.5, "no_answer": 0.5,
            "query_left_open": 0.0}  # fmt: skip
    for kind, reward in want.items():
        messages = mixture.trajectory(kind, "P <think>", q, docs, random.Random(0), "", 1.0)
        solution = "".join(m["content"] for m in messages[1:])
        searches = sum(m["role"] == "tool" for m in messages)
        got = score_solution(solution, [q.answer], STAGE1_FORMAT, {"num_searches": searches}).reward
        assert got == reward, (kind, got, solution)
    assert abs(sum(mixture.MIXTURE.values()) - 1.0) < 1e-9


def test_sft_messages_keep_documents_out_of_the_loss(tmp_path):
    """Through OpenRLHF's own SFTDataset with the SFT stage's chat template: the loss mask covers the
    policy's segments and the EOS, never a token of the documents nor of the prompt."""
    from openrlhf.datasets import SFTDataset

    from searchrl.tiny_policy.model import build_policy

    solution = (
        " I will search. <|begin_of_query|> dune author <|end_of_query|>\n\n<|begin_of_documents|>\n"
        "(1)Dune is a novel by Frank Herbert.\n<|end_of_documents|>\n\n It is Frank Herbert. </think>\n"
        "<answer> Frank Herbert </answer>"
    )
    messages = trajectory_messages("Question: who wrote Dune? <think>", solution, "</s>")
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[2]["content"].startswith("<|begin_of_documents|>") and messages[3]["content"].endswith("</s>")
    assert "".join(m["content"] for m in messages[1:]) == solution + "</s>"
    folder = build_policy(tmp_path / "p", [solution] * 30)
    from datasets import Dataset
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    cfg = sft.plan_sft([])["flags"]
    strategy = type("S", (), {"args": type("A", (), {"data": type("D", (), {
        "input_key": "messages", "output_key": None, "apply_chat_template": True,
        "tokenizer_chat_template": cfg["data.tokenizer_chat_template"]})})})()  # fmt: skip
    ds = SFTDataset(Dataset.from_list([{"messages": messages}]), tok, 4096, strategy, multiturn=True,
                    num_processors=1)  # fmt: skip
    ids, _, loss_mask = ds[0]
    trained = tok.decode(ids[0][loss_mask[0].roll(1).bool()])  # the targets of the masked positions
    assert "is a novel by" not in trained and "begin_of_documents" not in trained  # no document token is a target
    assert "<|begin_of_query|> dune author" in trained and "<answer> Frank Herbert </answer>" in trained
    assert trained.endswith("</s>") and "who wrote Dune" not in trained


def test_prepare_sft_from_released_trajectories(tmp_path):
    out = tmp_path / "sft.jsonl"
    rc = prepare_sft(["--input", str(ROOT / "examples/bamboogle_llama_sample.jsonl"), "--out", str(out),
                           "--eos", "</s>"])  # fmt: skip
    assert rc == 0
    rows = [json.loads(line) for line in out.open()]
    assert len(rows) == 24 and all(r["messages"][0]["role"] == "user" for r in rows)
    assert all(
        m["content"].startswith("<|begin_of_documents|>") for r in rows for m in r["messages"] if m["role"] == "tool"
    )


def test_sft_flags_pass_train_sft_parser():
    plan = sft.plan_sft([])
    assert "--data.multiturn" in plan["train_args"] and "--ds.zero_stage" in plan["train_args"]
    with pytest.raises(ValueError, match="not flags"):
        sft.plan_sft(["openrlhf.rollout.batch_size=3"])


def test_stage2_without_a_stage1_checkpoint_says_how_to_make_one(tmp_path):
    from searchrl.config import ConfigError
    from searchrl.rehearsal.training import train

    with pytest.raises(ConfigError, match=r"searchrl stage rehearse stage1 --train --steps N --out"):
        train("stage2", None, [], 2, out=tmp_path)


def test_step_curves_and_synced_digests_read_openrlhf_logs(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from searchrl.rehearsal.training import step_curves, step_table, synced_digests

    writer = SummaryWriter(str(tmp_path / "tb" / "run"))
    for step, reward in ((1, 0.25), (2, 0.75)):
        for key, value in (("reward", reward), ("score", reward / 2), ("timing/generation", 3.0)):
            writer.add_scalar(f"train/{key}", value, step)
    writer.add_scalar("eval/ignored", 1.0, 1)
    writer.close()
    curves = step_curves(tmp_path / "tb")
    assert curves == {1: {"reward": 0.25, "score": 0.125, "timing/generation": 3.0},
                      2: {"reward": 0.75, "score": 0.375, "timing/generation": 3.0}}  # fmt: skip
    assert "0.750" in step_table(curves).splitlines()[2]
    log = tmp_path / "sync.jsonl"
    log.write_text("".join(json.dumps({"pid": p, "sync": s, "digest": d}) + "\n"
                           for p, s, d in ((1, 1, "a"), (2, 1, "a"), (1, 2, "b"), (2, 2, "b"))))  # fmt: skip
    assert synced_digests(log) == ["b", "b"]


def test_stage1_alternates_real_questions_with_the_training_people_and_never_sees_heldout():
    """Stage 1 keeps seeing the fictional people's questions, or the warm start's naming of them in the query
    wears off before stage 2 needs it; development and held-out people stay out of training."""
    people = {json.loads(line)["question"] for line in (EXAMPLES / "fictional/train.jsonl").open(encoding="utf-8")}
    heldout = {
        json.loads(line)["question"]
        for split in ("dev", "heldout")
        for line in (EXAMPLES / f"fictional/{split}.jsonl").open(encoding="utf-8")
    }
    rows = stage_questions("stage1_format", 400)
    assert [r["question"] in people for r in rows[:10]] == [False, True] * 5
    assert len({r["question"] for r in rows[1::2]}) == 200 and not {r["question"] for r in rows} & heldout
    assert all(r["question"] in people for r in stage_questions("stage2_answer", 50))


def test_each_rollout_step_openrlhf_logs_is_read_for_the_screen():
    from searchrl.rehearsal.training import GLOBAL_STEP

    line = (
        "\x1b[36m(PPOTrainer pid=12209)\x1b[0m INFO 11-26 10:13:56 ppo_trainer.py:551] \u2728 Global step 2: "
        "{'violation_forged_documents': 0.0, 'mean_reward': 9.0, 'reward': -0.078125, 'policy_loss': 0.005}"
    )
    assert GLOBAL_STEP.search(line).groups() == ("2", "-0.078125")
    assert GLOBAL_STEP.search("Train epoch [1/1]: reward=1") is None


def test_a_shared_ray_head_with_too_few_gpus_is_refused_not_waited_on(tmp_path):
    from types import SimpleNamespace

    from searchrl.config import ConfigError
    from searchrl.rehearsal.training import head_for

    shared = SimpleNamespace(num_gpus=1)
    assert head_for(shared, tmp_path, 1) is shared  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="1 logical GPUs and this job needs 2"):
        head_for(shared, tmp_path, 2)  # type: ignore[arg-type]


def test_jobs_side_by_side_share_the_rehearsal_index():
    """benchmarks.learning starts a stage's run and its control at once, and each job's first act is
    `rehearsal_index()`: both must get the finished index (a shared temporary name once failed one of them)."""
    first = rehearsal_index()  # built once (or reused): the case of the benchmark's jobs
    manifest = (first / "manifest.json").stat().st_mtime_ns
    with ThreadPoolExecutor(3) as pool:
        got = list(pool.map(lambda _: rehearsal_index(), range(3)))
    assert len(set(got)) == 1 and (got[0] / "manifest.json").is_file()
    # A finished index is left alone: a server started on it by another job must never find its manifest gone.
    assert (first / "manifest.json").stat().st_mtime_ns == manifest


def test_which_trainer_ran_and_its_step_clock_are_read_from_the_jobs_own_lines(tmp_path):
    def line(actor: str, when: str, where: str, text: str) -> str:
        return f"\x1b[36m({actor} pid=1)\x1b[0m INFO {when} {where}] {text}\n"

    sync, asynchronous = tmp_path / "sync.log", tmp_path / "async.log"
    sync.write_text(
        line("PPOTrainer", "11-27 02:31:18", "ppo_trainer.py:551", "\u2728 Global step 1: {'reward': 0.5}")
        + line("PPOTrainer", "11-27 02:31:33", "ppo_trainer.py:551", "\u2728 Global step 2: {'reward': 0.6}")
    )
    asynchronous.write_text(
        line("PPOTrainerAsync", "11-27 02:38:56", "ppo_trainer_async.py:290", "queue_size=1")
        + line("TrainingActor", "11-27 23:59:57", "ppo_trainer_async.py:244", "Global step 1: {'x': 1}")
        + line("TrainingActor", "11-28 00:00:09", "ppo_trainer_async.py:244", "Global step 2: {'x': 1}")
    )
    assert (trainer_class(sync), step_clock(sync)) == ("PPOTrainer", [0.0, 15.0])
    assert (trainer_class(asynchronous), step_clock(asynchronous)) == ("PPOTrainerAsync", [0.0, 12.0])
    assert trainer_class(tmp_path / "none.log") is None and step_clock(tmp_path / "none.log") == []


def test_async_must_read_as_sync_to_the_monitors_readiness_and_reward_keys(tmp_path):
    """`readings_differ` (CI compares its sync and async rehearsals with it) passes runs that log every signal at
    every step under keys scored once, and names each way an async run could read differently."""
    from types import SimpleNamespace

    from torch.utils.tensorboard import SummaryWriter

    from searchrl.rehearsal.training import monitor_readings, readings_differ, scoring_record

    signals = ("format_ok", "searched", "num_searches", "reward")

    def run(name: str, steps: int, gap: tuple[str, int] | None = None, twice: bool = False, tb_keys=signals):
        tb = tmp_path / name / "tb"
        writer = SummaryWriter(str(tb / "run"))
        for step in range(1, steps + 1):
            for key in tb_keys:
                if (key, step) != gap:
                    writer.add_scalar(f"train/{key}", 0.5 + step / 10, step)
        writer.close()
        rows = [{"request_id": f"k{i}", "item": 0, "items": 1, "reward": 1.0, "logs": {"format_ok": 1, "searched": 1}}
                for i in range(4 * steps)]  # fmt: skip
        rows += rows[:1] if twice else []
        (tmp_path / name / "scored.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        stage = SimpleNamespace(stage="stage1_format", openrlhf={"logger.tensorboard_dir": str(tb)})
        return {
            "steps": steps,
            "extra_logs_keys_consistent": gap is None,
            "extra_logs_keys": sorted(tb_keys),
            "scoring": scoring_record(tmp_path / name / "scored.jsonl"),
            "readings": monitor_readings(stage),
        }

    sync = run("sync", 1)
    assert sync["readings"]["when_ready"]["step"] == 1 and set(sync["readings"]["health_signals"]) == set(signals)
    assert readings_differ(sync, run("async", 2)) == []
    problems = " | ".join(readings_differ(sync, run("gap", 2, gap=("searched", 2))))
    assert "not logged at each of its 2 steps: {'searched': 1}" in problems
    assert "scored twice" in " ".join(readings_differ(sync, run("twice", 2, twice=True)))
    lost = readings_differ(sync, run("lost", 2, tb_keys=("format_ok", "num_searches", "reward")))
    assert any("['searched'] never reached TensorBoard" in p for p in lost)
    assert any("searchrl.health's signals" in p for p in lost)


def test_the_fused_adam_prebuild_runs_the_ninja_the_training_jobs_run(monkeypatch):
    """torch builds with the ninja on PATH and ninja rebuilds what another version logged: set-up's prebuild must
    see the PATH the Ray head gives the job's workers (the venv's bin first), or the first job rebuilds the op."""
    import shutil

    from searchrl.process import venv_first
    from searchrl.rehearsal.cpu import prebuild

    seen = {}

    class Builder:
        def load(self, verbose: bool) -> None:
            seen["ninja"] = shutil.which("ninja")

    class Accelerator:
        def create_op_builder(self, name: str) -> Builder:
            return Builder()

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")  # what prebuild sets, restored after
    monkeypatch.setattr("deepspeed.accelerator.get_accelerator", lambda: Accelerator())
    prebuild.prebuild()
    assert seen["ninja"] == shutil.which("ninja", path=venv_first("/usr/bin:/bin"))
    assert seen["ninja"] == str(Path(sys.executable).parent / "ninja")
    # Set-up runs it before the project's dependencies are installed: nothing beyond DeepSpeed may be imported.
    absent = "import sys; sys.modules.update(dict.fromkeys(['httpx', 'fastapi', 'pydantic', 'yaml', 'numpy'])); "
    subprocess.run([sys.executable, "-c", absent + "import searchrl.rehearsal.cpu.prebuild"], cwd=ROOT, check=True)


def test_the_quickstart_line_reports_what_the_reward_server_scored(tmp_path):
    """Each stage's line gives its measure and the reward server's own mean reward and format rate per step's batch
    (read from its score log in scoring order), so a reward that falls while EM rises shows why."""
    from launch.quickstart import stage_line

    log = tmp_path / "scored.jsonl"
    rows = [(1.0, 1.0), (0.0, 1.0), (-2.0, 0.0), (1.0, 1.0), (1.0, 1.0), (-2.0, 0.0), (9.0, 1.0)]  # 3 steps of 2 + 1
    log.write_text("".join(json.dumps({"reward": r, "logs": {"format_ok": f}}) + "\n" for r, f in rows))
    served = training.served_rewards(log, per_step=2, steps=3)
    assert served == [
        {"reward": 0.5, "format_ok": 1.0},
        {"reward": -0.5, "format_ok": 0.5},
        {"reward": -0.5, "format_ok": 0.5},
    ]
    assert training.served_rewards(log, per_step=4, steps=3) == [{"reward": 0.0, "format_ok": 0.75}]
    trained = {"score_first": 0.14, "score_last": 0.59, "server_reward_first": 0.5, "server_reward_last": -0.5,
               "server_format_ok_first": 1.0, "server_format_ok_last": 0.5, "steps": 3, "seconds": 60.0}  # fmt: skip
    line = stage_line("stage2", trained)
    assert line == (
        "[quickstart] stage2: EM 0.14 -> 0.59; reward server: mean reward 0.50 -> -0.50, format kept 1.00 -> 0.50; "
        "first to last of 3 steps (60 s)"
    )
    assert "mean reward n/a" in stage_line("stage1", {**trained, "server_reward_first": None})


class FlakyHead(RayHead):
    """A head whose `ray start` is a stand-in: the first `failures` starts exit at once, the next
    `dashboard_failures` live on after printing Ray's line for a dashboard that died (no job server), then one
    serves the job server's version route on the chosen dashboard port."""

    def __init__(self, workdir: Path, failures: int, dashboard_failures: int = 0) -> None:
        self.failures = failures
        self.dashboard_failures = dashboard_failures
        self.starts = 0
        super().__init__(workdir)

    def launch(self) -> None:
        ports = ray_ports()
        self.first_port, self.dashboard_port = ports[RAY_NAMED_PORTS[0]], ports["dashboard"]
        self.starts += 1
        if self.starts <= self.failures:
            code = "import sys; print('GCS did not start'); sys.exit(1)"
        elif self.starts <= self.failures + self.dashboard_failures:
            code = (
                "import time\n"
                "print('ERROR dashboard.py:326 -- The dashboard on node vm failed with the following error:', "
                "flush=True)\n"
                "time.sleep(600)\n"
            )
        else:
            code = (
                "import http.server\n"
                "class H(http.server.BaseHTTPRequestHandler):\n"
                "    def do_GET(self):\n"
                "        self.send_response(200); self.end_headers(); self.wfile.write(b'{}')\n"
                f"http.server.HTTPServer(('127.0.0.1', {self.dashboard_port}), H).serve_forever()\n"
            )
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT)


@pytest.mark.parametrize(
    ("failures", "dashboard_failures", "said", "logged"),
    [(2, 0, "ray start exited with 1", "GCS did not start"), (0, 2, "dashboard failed to start", "The dashboard on")],
)
def test_a_ray_start_that_fails_while_starting_is_started_again_on_new_ports(
    tmp_path, capsys, failures, dashboard_failures, said, logged
):
    """A `ray start` that exits, or one that lives on after its dashboard (the job server's process) died: seen under
    load, where the dashboard gave up on a module after Ray's 30 s and the rehearsal waited out its 180 s."""
    head = FlakyHead(tmp_path, failures=failures, dashboard_failures=dashboard_failures)
    try:
        head.wait(timeout_s=60)
    finally:
        head.stop()
    assert head.starts == 3
    assert capsys.readouterr().out.count(f"{said}; starting again on new ports") == 2
    assert (tmp_path / "ray_head.log").read_text().count(logged) == 2  # each start's output kept
    assert head.first_port not in held_blocks(BLOCKS_DIR)
    assert head.env["RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT"] == "180"


def test_a_ray_start_that_keeps_failing_is_an_error_that_shows_its_log(tmp_path):
    head = FlakyHead(tmp_path, failures=3)
    with pytest.raises(RuntimeError, match="(?s)ray start exited with 1.*GCS did not start"):
        head.wait(timeout_s=60)
    assert head.starts == 3


def test_train_takes_search_r1_from_the_warm_start_and_names_the_stages_it_takes(tmp_path):
    from searchrl.config import ConfigError
    from searchrl.rehearsal.training import FROM_WARM_START, checked_request

    stage, out, pretrain = checked_request("search_r1", 1, None, tmp_path, None)
    assert stage == "search_r1" and stage in FROM_WARM_START and pretrain is None
    with pytest.raises(ConfigError, match=r"--train rehearses stage1, stage2, search_r1 \(got rag_r1\)"):
        checked_request("rag_r1", 1, None, tmp_path, None)
