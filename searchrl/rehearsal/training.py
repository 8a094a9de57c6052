"""`searchrl stage rehearse STAGE --train [--steps N]`: the whole training job, both halves, on CPU.

The job is what a real submit runs: `ray job submit` with the real submit's runtime_env (upload,
excludes, env_vars; searchrl/job/plan.py) and OpenRLHF's own `openrlhf.cli.train_ppo_ray` with the stage's
flags: its parser, its checks, its trainer, the DeepSpeed actor (ZeRO-3, packing, gradient checkpointing,
sleep), the weight broadcast to the engines, checkpoints, resume. The agent is the stage's agent file against live
servers (the bundled mini corpus and the fictional people of `examples/fictional/`, indexed by
`searchrl index build`). The policy is the tiny policy (`searchrl/tiny_policy/model.py`) after its warm start.

What a CPU cannot do is overridden, each override printed with its reason and applied after
OpenRLHF's checks (`searchrl/rehearsal/cpu/launch.py`); the CPU layer (`searchrl/rehearsal/cpu/`: a vLLM
stand-in, a gloo weight-sync communicator, a flash-attn stub, five CUDA shims) reaches the job only through this
rehearsal's runtime_env additions (searchrl/rehearsal/cpu_layer.py), never a real submit's.

The last line printed is one JSON object: the steps, the checkpoints, the checks (weights synced equal
the saved model, a resumed run advances, extra_logs keys agree under a sampling policy) and the rewards.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from searchrl.config import ConfigError
from searchrl.curves import read_curves
from searchrl.health import Thresholds, collapse_flags, summary
from searchrl.job.plan import plan_stage, runtime_env
from searchrl.job.readiness import readiness
from searchrl.paths import ROOT
from searchrl.process import free_port, searchrl_command, start_command, stop
from searchrl.protocols import get_protocol
from searchrl.rehearsal.cpu_layer import Override, cpu_overrides, runtime_env_with_cpu_layer
from searchrl.rehearsal.episodes import stand_in_chat_model
from searchrl.rehearsal.inputs import REHEARSAL_DIR, prepare_prompts, rehearsal_index
from searchrl.rehearsal.ray_head import Head, open_head
from searchrl.rehearsal.warm_start import ensure as ensure_warm_start
from searchrl.stage.config import STAGES, load_stage, stage_config_file, stage_package
from searchrl.stage.schedules import gpus_needed

TRAIN_DIR = REHEARSAL_DIR / "train"
ENTRY = "openrlhf.cli.train_ppo_ray"
# The stage configs --train runs, and those that start from the tiny policy's warm start (stage 2 starts from stage
# 1's checkpoint; Search-R1's recipe from the base policy, as its scripts do).
TRAINABLE = ("stage1_format", "stage2_answer", "search_r1")
FROM_WARM_START = ("stage1_format", "search_r1")
# The tiny policy's learning rate (R1-Searcher's 7B policies: 2e-6). At 1e-3 stage 1 learns the format as fast
# but wears off the warm start's copying (queries naming the person 0.5 -> 0.04-0.10), so stage 2 cannot learn.
DEFAULT_LR = 3e-4
# The prompt pool under dynamic filtering, in step counts' worth of prompts (see prompt_pool()).
DYNAMIC_FILTERING_POOL = 1.5


def job_command(head: Head, env: dict[str, Any], train_args: list[str]) -> list[str]:
    ray = str(Path(sys.executable).parent / "ray")
    entry = ["python3", "-m", "searchrl.rehearsal.cpu.launch", ENTRY, *train_args]
    return [ray, "job", "submit", "--address", head.address, "--runtime-env-json", json.dumps(env), "--", *entry]


GLOBAL_STEP = re.compile(r"Global step (\d+): .*?'reward': ([-\d.e]+)")
# `ray job submit`'s line for a failed job, after which it repeats the job's last logs.
FAILED_ECHO = re.compile(r"Job '[^']*' failed")
# Which of OpenRLHF's trainers ran, read from the job's own lines: the async one logs its steps from its
# TrainingActor, in ppo_trainer_async.py; the sync one from ppo_trainer.py.
TRAINERS = {"PPOTrainerAsync": re.compile(r"ppo_trainer_async\.py:\d+\] Global step"),
            "PPOTrainer": re.compile(r"ppo_trainer\.py:\d+\] .*Global step")}  # fmt: skip


STEP_LINE = re.compile(r"(\d\d-\d\d \d\d:\d\d:\d\d) ppo_trainer(?:_async)?\.py:\d+\] .*?Global step (\d+):")


def step_clock(job_log: Path) -> list[float]:
    """When each rollout step ended, in seconds after the first did, from the timestamps of OpenRLHF's own step
    lines (to the second): the steady pace of a run, without its start-up."""
    text = job_log.read_text(encoding="utf-8", errors="replace") if job_log.is_file() else ""
    stamps = [time.strptime(f"2000-{m.group(1)}", "%Y-%m-%d %H:%M:%S") for m in STEP_LINE.finditer(text)]
    seconds = [time.mktime(s) for s in stamps]
    return [t - seconds[0] for t in seconds]


def trainer_class(job_log: Path) -> str | None:
    text = job_log.read_text(encoding="utf-8", errors="replace") if job_log.is_file() else ""
    return next((name for name, pattern in TRAINERS.items() if pattern.search(text)), None)


HEARTBEAT_S = 15.0
# Long enough after a step's log line for the next step's rollout to be under way.
KILL_DELAY_S = 3.0
# The head's own processes titled `ray::` (its agents, the job supervisor, idle workers): they survive a job's crash.
RAY_OWN = ("ray::JobSupervisor", "ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")


def run_job(
    head: Head,
    env: dict[str, Any],
    train_args: list[str],
    log: Path,
    label: str = "train",
    kill_after_step: int | None = None,
    killed: list[str] | None = None,
) -> int:
    """`ray job submit` with its output in `log`; a line on the screen for every rollout step OpenRLHF logs, and
    one at least every HEARTBEAT_S seconds while it starts up, so a long run is never silent. `label` tells the
    lines of jobs that run side by side apart. `kill_after_step`: KILL_DELAY_S after that step is logged, in the
    middle of the next, kill -9 the job's processes (their names go to `killed`)."""
    t0 = last = time.monotonic()
    steps = 0
    kill_at: float | None = None
    with log.open("w", encoding="utf-8") as f, log.open("r", encoding="utf-8", errors="replace") as tail:
        proc = subprocess.Popen(job_command(head, env, train_args), cwd=ROOT, env=head.env, stdout=f, stderr=f)
        pending = ""
        while proc.poll() is None:
            time.sleep(1.0)
            pending += tail.read()
            *lines, pending = pending.split("\n")
            for step, reward in (m.groups() for line in lines if (m := GLOBAL_STEP.search(line))):
                steps += 1
                took = time.monotonic() - t0
                print(f"[{label}] step {step}: mean reward {float(reward):.3f} ({took:.0f} s)", flush=True)
                last = time.monotonic()
                if kill_after_step is not None and steps == kill_after_step:
                    kill_at = last + KILL_DELAY_S
            if kill_at is not None and time.monotonic() >= kill_at:
                kill_at = None
                names = kill_job(head)
                if killed is not None:
                    killed.extend(names)
                print(f"[{label}] kill -9 of the job's {len(names)} processes, mid-step {steps + 1}", flush=True)
            if time.monotonic() - last >= HEARTBEAT_S:
                took = time.monotonic() - t0
                print(f"[{label}] running ({took:.0f} s, {steps} steps so far; log {log})", flush=True)
                last = time.monotonic()
    return proc.returncode


def kill_job(head: Head) -> list[str]:
    """SIGKILL the job's driver and its actors, as a crashed node or an OOM kill leaves them; the Ray head and
    its job supervisor live on, as a cluster does. Returns the names killed."""
    names = []
    for pid in head.descendants():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        actor = cmd.startswith("ray::") and not cmd.startswith(RAY_OWN)
        if actor or "searchrl.rehearsal.cpu.launch" in cmd:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            names.append(cmd.split()[0] if actor else "driver")
    return names


def logged_steps(log: Path) -> list[int]:
    """Every rollout step a job log reports, in order, repeats kept. When the job failed, `ray job submit` repeats
    the job's last 20,000 characters after its "failed" line: that echo is not counted again."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    text = text[: m.start()] if (m := FAILED_ECHO.search(text)) else text
    return [int(m.group(1)) for m in GLOBAL_STEP.finditer(text)]


def train_scalars(logdir: Path) -> list[tuple[str, int, float]]:
    """(tag without `train/`, step, value) of every `train/*` scalar in the event files under `logdir`, repeats
    kept: a resubmitted run writes a second event file beside the first."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found = []
    for file in sorted(logdir.rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(file), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            if tag.startswith("train/"):
                found += [(tag[len("train/") :], e.step, e.value) for e in acc.Scalars(tag)]
    return found


def step_curves(logdir: Path) -> dict[int, dict[str, float]]:
    """Step -> every `train/*` scalar OpenRLHF logged at that step (tag without the prefix)."""
    steps: dict[int, dict[str, float]] = {}
    for tag, step, value in train_scalars(logdir):
        steps.setdefault(step, {})[tag] = value
    return dict(sorted(steps.items()))


def synced_digests(sync_log: Path) -> list[str]:
    """The weights digest each engine reported after its last sync."""
    return [entry["digest"] for entry in last_syncs(sync_log)]


def last_syncs(sync_log: Path) -> list[dict[str, Any]]:
    """Each engine's last sync record: its weights digest, and its pauses and requests across syncs so far."""
    last: dict[int, dict[str, Any]] = {}
    if sync_log.is_file():
        for line in sync_log.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            last[entry["pid"]] = entry
    return list(last.values())


def saved_digest(hf_dir: Path) -> str:
    """The digest of a saved Hugging Face folder, loaded by plain transformers (as the engine holds it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from searchrl.weights import weights_digest

    AutoTokenizer.from_pretrained(hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.bfloat16)
    return weights_digest(model.named_parameters())


def optimizer_steps(ckpt: Path) -> int | None:
    """DeepSpeed's own count of optimizer steps, from the latest checkpoint's model states."""
    import torch

    latest = ckpt / "latest"
    if not latest.is_file():
        return None
    states = sorted((ckpt / latest.read_text().strip()).glob("*model_states.pt"))
    if not states:
        return None
    # DeepSpeed's model states hold tensors, sizes and plain containers: the safe loader reads them.
    return int(torch.load(states[0], map_location="cpu", weights_only=True).get("global_steps", 0))


def step_table(curves: dict[int, dict[str, float]]) -> str:
    """One row per step: the stage's score is its correctness (stage 1: searched with well-formed blocks
    and no format violation; stage 2: the answer metric)."""
    lines = [
        f"{'step':>4} {'reward':>7} {'score':>6} {'em':>5} {'searches':>8} {'length':>7} {'gen s':>6} {'train s':>7}"
    ]
    for step, c in curves.items():
        lines.append(
            f"{step:>4} {c.get('reward', 0):>7.3f} {c.get('score', 0):>6.3f} {c.get('em', 0):>5.2f}"
            f" {c.get('num_searches', 0):>8.2f} {c.get('response_length', 0):>7.0f}"
            f" {c.get('timing/generation', 0):>6.1f} {c.get('timing/ppo_train', 0):>7.1f}"
        )
    return "\n".join(lines)


def _clean(*paths: Path) -> None:
    import shutil

    for p in paths:
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def prompt_pool(flags: dict[str, Any]) -> float:
    """How many step counts' worth of prompts the run gets. Dynamic filtering draws a new prompt for every group it
    drops, and OpenRLHF's run ends when the prompts do: a pool of 1.5x lets it fill about `steps` batches at the
    pass rates seen here, and bounds the run at 1.5x `steps`."""
    return DYNAMIC_FILTERING_POOL if flags.get("algo.dynamic_filtering_enable") else 1


def previous_checkpoint_missing(out: Path) -> str | None:
    resolved = out / "stage1_format.resolved.json"
    if not resolved.is_file():
        return f"no stage-1 rehearsal in {out}"
    final = Path(json.loads(resolved.read_text(encoding="utf-8"))["openrlhf"]["ckpt.output_dir"])
    if not (final / "config.json").is_file():
        return f"{final}: stage 1's final checkpoint is not there"
    return None


def head_for(head: Head | None, work: Path, gpus: int) -> Head:
    """A new head with the job's `gpus` logical GPUs, or the shared `head` when it has enough: with fewer, the
    job's placement group would wait for GPUs that never come, so that is refused instead."""
    if head is None:
        return open_head(work, num_cpus=4, num_gpus=gpus)
    if head.num_gpus < gpus:
        raise ConfigError(f"the shared Ray head has {head.num_gpus} logical GPUs and this job needs {gpus}")
    return head


@dataclass
class TrainingRun:
    """One training rehearsal as `train` sets it up: the stage, its folders, the policy it starts from and every
    override with its reason."""

    stage_name: str
    stage: str
    model: str | None
    overrides: list[str]
    steps: int
    out: Path
    work: Path
    start: list[str]
    cpu_and_run: list[Override]
    pool: float
    samples_per_step: int
    servers: list[str] = field(default_factory=list)

    @property
    def final(self) -> Path:
        return self.work / "final"

    @property
    def ckpt(self) -> Path:
        return self.work / "ckpt"

    @property
    def tb(self) -> Path:
        return self.work / "tensorboard"

    def plan(self, overrides: list[Override] | None = None, servers: bool = True) -> dict[str, Any]:
        """The stage's plan with this run's policy, the user's overrides, the servers and the given overrides."""
        flags = [
            f"openrlhf.{o.flag}={json.dumps(o.value)}" for o in (self.cpu_and_run if overrides is None else overrides)
        ]
        extra = [*self.servers, *flags] if servers else []
        return plan_stage(self.stage_name, self.model, [*self.start, *self.overrides, *extra])


def checked_request(
    stage_name: str, steps: int, crash_after_step: int | None, out: Path | None, pretrain: Path | None
) -> tuple[str, Path, Path | None]:
    """The stage, the output folder and the policy folder of a request, or a ConfigError saying what to change."""
    stage = STAGES[stage_name]
    if crash_after_step is not None and not 1 <= crash_after_step < steps:
        raise ConfigError(f"--crash-after-step {crash_after_step}: must be at least 1 and below --steps ({steps})")
    if stage not in TRAINABLE:
        raise ConfigError(
            f"--train rehearses {', '.join(k for k, v in STAGES.items() if v in TRAINABLE)} (got {stage_name})"
        )
    out = (out or TRAIN_DIR).resolve()
    pretrain = pretrain.resolve() if pretrain is not None else None
    if pretrain is not None and not (pretrain / "config.json").is_file():
        raise ConfigError(f"--pretrain {pretrain}: not a Hugging Face model folder (no config.json)")
    if stage == "stage2_answer" and pretrain is None and (missing := previous_checkpoint_missing(out)):
        where = "" if out == TRAIN_DIR.resolve() else f" --out {out}"
        raise ConfigError(
            f"stage 2 starts from stage 1's final checkpoint, and {missing}: run "
            f"`searchrl stage rehearse stage1 --train --steps N{where}` first (or pass --pretrain PATH)"
        )
    return stage, out, pretrain


def starting_policy(stage: str, out: Path, pretrain: Path | None, protocol: str) -> list[str]:
    """The overrides that name the policy: stage 1 from the warm start in the stage's protocol, stage 2 from stage
    1's final checkpoint (through its resolved config, as a real stage 2 starts), either from --pretrain when given."""
    if stage in FROM_WARM_START and pretrain is None:
        pretrain = ensure_warm_start(protocol)
    if pretrain is not None:
        return [f"openrlhf.actor.model_name_or_path={pretrain}", "init_from=null"]
    return [f"init_from={out / 'stage1_format.resolved.json'}"]


def set_up(
    stage_name: str,
    stage: str,
    model: str | None,
    overrides: list[str],
    steps: int,
    out: Path,
    pretrain: Path | None,
    lr: float,
    seed: int,
    crash_after_step: int | None,
) -> TrainingRun:
    """The run's folders emptied, its prompts prepared, and the CPU's and the run's own overrides."""
    work = out / stage
    work.mkdir(parents=True, exist_ok=True)
    _clean(work / "final", work / "ckpt", work / "tensorboard", work / "sync.jsonl", work / "resumed")
    _clean(work / "crash_resume.sync.jsonl", work / "episodes")
    protocol = load_stage(stage_config_file(stage_name), overrides)[0].protocol
    start = starting_policy(stage, out, pretrain, protocol)
    base = plan_stage(stage_name, model, [*start, *overrides])
    if model is None and (stand_in := stand_in_chat_model(str(base["stage"].model), work)) is not None:
        # A chat policy's tokenizer is not here (search_r1's Qwen2.5-3B): its prompts rendered with a ChatML one.
        model = stand_in
        base = plan_stage(stage_name, model, [*start, *overrides])
    cpu = cpu_overrides(base["flags"], lr)
    prompts_per_step = next(o.value for o in cpu if o.flag == "rollout.batch_size")
    samples = next(o.value for o in cpu if o.flag == "rollout.n_samples_per_prompt")
    pool = prompt_pool(base["flags"])
    stage_cfg = base["stage"]
    own_prompt = stage_cfg.prompt is not None or get_protocol(stage_cfg.protocol).PROMPT is not None
    data = prepare_prompts(
        stage,
        str(model or stage_cfg.model),
        round(steps * prompts_per_step * pool),
        work,
        package=stage_package(stage_cfg.stage),
        config=stage_config_file(stage_name) if own_prompt else None,
        overrides=overrides if own_prompt else (),
    )
    episodes = (
        f"--steps {steps}: one pass over {steps} rollout batches"
        if pool == 1
        else f"--steps {steps} under dynamic filtering: one pass over {pool} x {steps} batches of prompts"
    )
    run = [
        Override("data.prompt_dataset", str(data), "the rehearsal's questions, prepared by the stage's own script"),
        Override("train.num_episodes", 1, episodes),
        Override("ckpt.output_dir", str(work / "final"), "the rehearsal's own folders"),
        Override("ckpt.path", str(work / "ckpt"), "the rehearsal's own folders"),
        Override("logger.tensorboard_dir", str(work / "tensorboard"), "the rehearsal's own folders"),
        Override("ckpt.save_steps", steps, "a DeepSpeed checkpoint at the last step, for the resume check")
        if crash_after_step is None
        else Override("ckpt.save_steps", 1, "a DeepSpeed checkpoint every step, for the crash check"),
        Override("train.seed", seed, "--seed"),
    ]
    if base["flags"].get("eval.dataset"):
        # The stage validates on a test set the rehearsal does not have: its own questions stand in (read at start).
        run.append(Override("eval.dataset", str(data), "the rehearsal's questions stand in for the stage's test set"))
    return TrainingRun(
        stage_name, stage, model, overrides, steps, out, work, start, [*cpu, *run], pool, prompts_per_step * samples
    )


def start_servers(run: TrainingRun, search_url: str | None, search_latency_s: float, started: list[Any]) -> Path:
    """A retrieval server over the rehearsal index (unless `search_url` serves one) and a reward server on the
    run's resolved stage; their URLs join the run's overrides. Returns the reward server's score log."""
    if search_url is None:
        search_port = free_port()
        serve = searchrl_command("search", "serve", "--index", str(rehearsal_index()))
        serve += ["--latency-s", str(search_latency_s)]
        started.append(start_command(serve, search_port, run.work / "retrieval.log", 300))
        search_url = f"http://127.0.0.1:{search_port}"
    run.servers = [f"search.urls={search_url}"]
    spec = run.work / "stage.json"
    spec.write_text(run.plan()["stage"].model_dump_json(), encoding="utf-8")
    reward_port = free_port()
    scored_log = run.work / "scored.jsonl"
    scored_log.unlink(missing_ok=True)
    reward = searchrl_command("reward", "serve", "--resolved", str(spec), "--log-jsonl", str(scored_log))
    started.append(start_command(reward, reward_port, run.work / "reward.log"))
    run.servers.append(f"reward_server.urls=http://127.0.0.1:{reward_port}")
    return scored_log


def crash_check(
    run: TrainingRun, head: Head, label: str, crash_after_step: int, killed: list[str]
) -> tuple[int, dict[str, Any], Path, Path]:
    """After the job was killed mid-step: resubmit it from the last DeepSpeed checkpoint and read whether every step
    was logged once. Returns the resubmission's exit code, the check, and its sync log and job log."""
    # The submit client may lose the log stream and exit 0 before the job is marked failed: what was killed says
    # whether the kill landed.
    if not killed:
        raise RuntimeError(f"the job finished before its kill after step {crash_after_step}: use more --steps")
    again = [*run.cpu_and_run, Override("ckpt.load_enable", True, "resubmitted after the kill")]
    print(f"[{label}] resubmitting after the kill, from the last DeepSpeed checkpoint", flush=True)
    # Its own sync log: the killed engines' last digests are of step K's weights, not the final ones.
    sync_log, job_log = run.work / "crash_resume.sync.jsonl", run.work / "crash_resume.log"
    env = runtime_env_with_cpu_layer(runtime_env(plan := run.plan(again)), again, sync_log)
    code = run_job(head, env, plan["train_args"], job_log, label)
    before, after = logged_steps(run.work / "job.log"), logged_steps(job_log)
    board = sorted(step for tag, step, _ in train_scalars(run.tb) if tag == "reward")
    crash = {
        "killed_after_step": crash_after_step,
        "killed": killed,
        "steps_before_kill": before,
        "steps_after_resubmit": after,
        "tensorboard_steps": board,
        "no_step_twice": len(set(before + after)) == len(before + after) and len(set(board)) == len(board),
        "all_steps": sorted(set(before + after)) == list(range(1, run.steps + 1)),
    }
    return code, crash, sync_log, job_log


def resume_check(run: TrainingRun, head: Head, label: str, curves: dict[int, dict[str, float]]) -> bool:
    """One more pass resumed from the DeepSpeed checkpoint, in folders of its own: it must log steps after the
    first run's last."""
    resumed_tb = run.work / "resumed/tensorboard"
    more = [
        Override("ckpt.load_enable", True, "resume from the DeepSpeed checkpoint"),
        Override("train.num_episodes", 2, "one more pass, after the resumed steps"),
        Override("logger.tensorboard_dir", str(resumed_tb), "the resumed run's own curves"),
        Override("ckpt.output_dir", str(run.work / "resumed/final"), "the resumed run's own final model"),
    ]
    again = [*run.cpu_and_run, *more]
    env = runtime_env_with_cpu_layer(runtime_env(plan := run.plan(again)), again, run.work / "resumed/sync.jsonl")
    print(f"[{label}] resuming from the DeepSpeed checkpoint (one more pass)", flush=True)
    code = run_job(head, env, plan["train_args"], run.work / "resume.log", label)
    after = step_curves(resumed_tb)
    return code == 0 and bool(after) and min(after) > max(curves) and max(after) > max(curves)


def train(
    stage_name: str,
    model: str | None,
    overrides: list[str],
    steps: int,
    *,
    resume: bool = True,
    out: Path | None = None,
    pretrain: Path | None = None,
    lr: float = DEFAULT_LR,
    seed: int = 0,
    head: Head | None = None,
    search_url: str | None = None,
    label: str = "train",
    search_latency_s: float = 0.0,
    crash_after_step: int | None = None,
) -> dict[str, Any]:
    """Run the stage's training job on CPU for `steps` rollout steps; returns the summary (see the module
    docstring). Raises ConfigError (a bad request) or RuntimeError (a failed job).

    `head`: a running Ray head to submit to (left running), and `search_url`: a retrieval server already serving
    the rehearsal index, so that several stages in a row pay the head's and the encoder's start-up once. `label`
    prefixes the progress lines (jobs side by side on one head). `search_latency_s`: the delay the retrieval
    server started here adds to each search (a web provider's, for benchmarks/async_rollout.py).
    `crash_after_step` K: the crash check instead of the resume check. A checkpoint every step, the job killed
    with kill -9 in the middle of step K + 1, then submitted again with `ckpt.load_enable`: it must go on from
    step K's checkpoint to the last step, with no step logged twice."""
    stage, out, pretrain = checked_request(stage_name, steps, crash_after_step, out, pretrain)
    t0 = time.monotonic()
    run = set_up(stage_name, stage, model, overrides, steps, out, pretrain, lr, seed, crash_after_step)
    started: list[Any] = []
    own_head = head is None
    try:
        scored_log = start_servers(run, search_url, search_latency_s, started)
        plan = run.plan()
        if stage == "stage1_format":
            (out / "stage1_format.resolved.json").write_text(plan["stage"].model_dump_json(indent=1), encoding="utf-8")
        for o in run.cpu_and_run:
            print(f"[override] {o.flag}={o.value!r}: {o.reason}", flush=True)
        sync_log = run.work / "sync.jsonl"
        env = runtime_env_with_cpu_layer(runtime_env(plan), run.cpu_and_run, sync_log)
        head = head_for(head, run.work, gpus_needed(plan["flags"]))
        head.wait()
        launch = f"python3 -m searchrl.rehearsal.cpu.launch {ENTRY}"
        print(f"[{label}] ray job submit ... -- {launch} (log {run.work / 'job.log'})", flush=True)
        killed: list[str] = []
        job_log = run.work / "job.log"  # the log of the run that made the final checkpoint
        code = run_job(head, env, plan["train_args"], job_log, label, crash_after_step, killed)
        crash = None
        if crash_after_step is not None:
            code, crash, sync_log, job_log = crash_check(run, head, label, crash_after_step, killed)
        curves = step_curves(run.tb)
        if code != 0 or not (run.final / "config.json").is_file():
            tail = "\n".join(job_log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:])
            raise RuntimeError(f"the training job failed (exit {code}); see {job_log}\n{tail}")
        train_steps = optimizer_steps(run.ckpt / "_actor")  # before the resumed run adds its own
        resumed = None
        if crash is not None:
            resumed = code == 0 and crash["no_step_twice"] and crash["all_steps"]
        elif resume:
            resumed = resume_check(run, head, label, curves)
    finally:
        if own_head and head is not None:
            head.stop()
        for proc in started:
            stop(proc)
    return {
        **summary_record(run, plan, curves, sync_log, scored_log, search_url is None, search_latency_s),
        "train_steps": train_steps,
        "resumed": resumed,
        "crash": crash,
        "seconds": round(time.monotonic() - t0, 1),
    }


def summary_record(
    run: TrainingRun,
    plan: dict[str, Any],
    curves: dict[int, dict[str, float]],
    sync_log: Path,
    scored_log: Path,
    own_search: bool,
    search_latency_s: float,
) -> dict[str, Any]:
    """What the run's logs, checkpoints and monitors say, read after it finished (see the module docstring)."""
    switch = None
    if plan["previous"] is not None:
        # What `--when-ready` reads on GPUs before it hands stage 1's checkpoint to stage 2: reported here.
        switch = readiness(plan["previous"][0], 0.9, 0.9, 10)
        switch["checkpoint_written"] = (Path(str(plan["policy"])) / "config.json").is_file()
    engines = last_syncs(sync_log)
    synced = [e["digest"] for e in engines]
    saved = saved_digest(run.final)
    rewards = [c["reward"] for c in curves.values() if "reward" in c]
    keys = {tuple(sorted(k for k in c if not k.startswith(("timing/", "rollout/")))) for c in curves.values()}
    # Under dynamic filtering a step scores more samples than it trains on: the log cannot be split into steps.
    served = served_rewards(scored_log, run.samples_per_step, run.steps) if run.pool == 1 else []
    job_log = run.work / "job.log"
    return {
        "stage": run.stage,
        "protocol": plan["stage"].protocol,
        "entry": ENTRY,
        "async": bool(plan["flags"].get("train.async_enable")),
        "partial_rollout": bool(plan["flags"].get("train.partial_rollout_enable")),
        "trainer": trainer_class(job_log),
        "engine_pauses": sum(e.get("pauses", 0) for e in engines),
        "requests_across_syncs": sum(e.get("across_syncs", 0) for e in engines),
        "steps": len(curves),
        "step_clock": step_clock(job_log),
        "search_latency_s": search_latency_s if own_search else None,
        "prompt_pool": run.pool,
        "pretrain": str(plan["policy"]),
        "pretrain_source": plan["policy_source"],
        "hf_checkpoint": str(run.final),
        "ds_checkpoint": str(run.ckpt / "_actor"),
        "weights_synced_equal_saved": bool(synced) and all(d == saved for d in synced),
        "extra_logs_keys_consistent": len(keys) == 1,
        "extra_logs_keys": sorted({k for step_keys in keys for k in step_keys}),
        "scoring": scoring_record(scored_log),
        "readings": monitor_readings(plan["stage"]),
        # OpenRLHF's logged `reward` (the agent's: the server's plus any agent-side term), and what the reward
        # server itself scored over the first and the last step's batch.
        "mean_reward_first": rewards[0] if rewards else None,
        "mean_reward_last": rewards[-1] if rewards else None,
        "server_reward_first": served[0]["reward"] if served else None,
        "server_reward_last": served[-1]["reward"] if served else None,
        "server_format_ok_first": served[0]["format_ok"] if served else None,
        "server_format_ok_last": served[-1]["format_ok"] if served else None,
        "score_first": next(iter(curves.values())).get("score") if curves else None,
        "score_last": curves[max(curves)].get("score") if curves else None,
        "overrides": [asdict(o) for o in run.cpu_and_run],
        "switch": switch,
        "tensorboard": str(run.tb),
        "curves": {str(k): v for k, v in curves.items()},
    }


def served_rewards(log: Path, per_step: int, steps: int) -> list[dict[str, float]]:
    """The reward server's mean reward and format rate (no rule broken) over each step's batch: the score log's
    first `steps` runs of `per_step` samples, in the order they were scored (each step generates its whole batch
    before the next; a resumed run appends after them)."""
    rows = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.is_file() else []
    chunks = [rows[i * per_step : (i + 1) * per_step] for i in range(steps)]
    return [
        {
            "reward": sum(r["reward"] for r in c) / per_step,
            "format_ok": sum(r["logs"].get("format_ok", 0.0) for r in c) / per_step,
        }
        for c in chunks
        if len(c) == per_step
    ]


def scoring_record(log: Path) -> dict[str, Any]:
    """The reward server's score log: every sample scored under an idempotency key, and no key scored twice (a
    retry answered again, or a sample scored both before and after a weight sync, would show here)."""
    keys, logs = [], set()
    for line in log.read_text(encoding="utf-8").splitlines() if log.is_file() else []:
        row = json.loads(line)
        keys.append((row.get("request_id"), row.get("item")))
        logs.add(tuple(sorted(row.get("logs", {}))))
    return {
        "samples_scored": len(keys),
        "keyed": bool(keys) and all(k is not None for k, _ in keys),
        "each_key_once": len(set(keys)) == len(keys),
        # The reward's extra_logs names: the same for every sample, and each reaches TensorBoard.
        "logs_keys": sorted({k for names in logs for k in names}),
        "logs_keys_per_sample_equal": len(logs) == 1,
    }


def monitor_readings(stage: Any) -> dict[str, Any]:
    """What the project's monitors read from the run's TensorBoard folder: `searchrl.health`'s signals (how many steps
    each holds) and collapse flags, and `--when-ready`'s readiness as a following stage would read this run."""
    curves = read_curves(Path(stage.openrlhf["logger.tensorboard_dir"]))
    ready = readiness(stage, 0.9, 0.9, 10)
    return {
        "health_signals": {name: s["steps"] for name, s in summary(curves).items()},
        "health_flags": collapse_flags(curves, Thresholds()),
        "when_ready": {k: v for k, v in ready.items() if k != "logdir"},
    }


def readings_differ(sync: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """How two rehearsals of a stage (sync, and async) read differently to the monitors, the readiness check and
    the reward server's idempotency keys; empty when they read alike. Values may differ (two runs learn
    differently) and so may the number of steps; what is read, and that it covers every step, may not."""
    problems = []
    for name, run in (("sync", sync), ("other", other)):
        scoring, readings, steps = run["scoring"], run["readings"], run["steps"]
        if not (scoring["keyed"] and scoring["each_key_once"] and scoring["logs_keys_per_sample_equal"]):
            problems.append(f"{name}: a sample scored without a key, a key scored twice or logs apart: {scoring}")
        missing = sorted(set(scoring["logs_keys"]) - set(run["extra_logs_keys"]))
        if missing:
            problems.append(f"{name}: the reward's extra_logs {missing} never reached TensorBoard")
        if scoring["samples_scored"] < steps:
            problems.append(f"{name}: {scoring['samples_scored']} samples scored over {steps} steps")
        short = {k: n for k, n in readings["health_signals"].items() if n != steps}
        if short:
            problems.append(f"{name}: searchrl.health's signals not logged at each of its {steps} steps: {short}")
        if readings["health_flags"]:
            problems.append(f"{name}: collapse flagged: {readings['health_flags']}")
        if readings["when_ready"].get("step") != steps:
            problems.append(f"{name}: --when-ready reads step {readings['when_ready'].get('step')}, not {steps}")
        if run["extra_logs_keys_consistent"] is not True:
            problems.append(f"{name}: extra_logs keys differ between steps")
    a, b = sync["readings"], other["readings"]
    if set(a["health_signals"]) != set(b["health_signals"]):
        problems.append(f"searchrl.health's signals: {sorted(a['health_signals'])} vs {sorted(b['health_signals'])}")
    if set(a["when_ready"]) != set(b["when_ready"]):
        problems.append(f"--when-ready's fields: {sorted(a['when_ready'])} vs {sorted(b['when_ready'])}")
    if sync["scoring"]["logs_keys"] != other["scoring"]["logs_keys"]:
        problems.append(f"the reward's extra_logs: {sync['scoring']['logs_keys']} vs {other['scoring']['logs_keys']}")
    return problems


def main(stage_name: str, model: str | None, overrides: list[str], steps: int, **kwargs: Any) -> int:
    """The command: the summary as a table, and last, one JSON line without the per-step curves."""
    try:
        result = train(stage_name, model, overrides, steps, **kwargs)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (RuntimeError, TimeoutError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    curves = {int(k): v for k, v in result.pop("curves").items()}
    print(step_table(curves))
    print(json.dumps(result))
    held = (
        # Under dynamic filtering the step count follows the filter's pass rate (see prompt_pool()).
        result["steps"] >= (steps if result["prompt_pool"] == 1 else 1)
        and result["weights_synced_equal_saved"]
        and result["extra_logs_keys_consistent"]
        and result["resumed"] is not False
    )
    return 0 if held else 1
