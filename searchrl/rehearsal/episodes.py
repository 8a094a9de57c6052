"""`searchrl stage rehearse STAGE [--episodes N] [key=value ...]`: the rollout half of a job as Ray runs it, on CPU.

Starts a local Ray head on 127.0.0.1 (free ports, its own temp dir), the retrieval and reward
servers on the bundled mini index (free ports) unless healthy ones for this stage are configured,
prepares the prompt data with the stage's own data preparation, runs the preflight, and submits
through the real `ray job submit` with the runtime_env a real submit uses (searchrl/job/plan.py), plus the
rehearsal code its job runs. Inside the job, searchrl/rehearsal/job.py runs the episodes through OpenRLHF's own
rollout and experience code. Stops what it started; prints a per-episode table and, last, one JSON line.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from searchrl.config import ConfigError, load
from searchrl.episodes.reader import EPISODES_DIR, episode_files, read_records
from searchrl.job import preflight
from searchrl.job.plan import plan_stage, runtime_env
from searchrl.paths import CONFIGS, EXAMPLES, ROOT, RUNS
from searchrl.process import free_port, searchrl_command, start_command, stop
from searchrl.protocols import TagProtocol, bind_template, get_protocol
from searchrl.rehearsal.cpu_layer import with_rehearsal_code
from searchrl.rehearsal.inputs import REHEARSAL_DIR, prepare_name, rehearsal_index
from searchrl.rehearsal.job import MARKER
from searchrl.rehearsal.ray_head import Head, open_head
from searchrl.routing.llm_router import LLMRouterBackend, RouterConfig
from searchrl.routing.loopback_pool import repoint, start_loopback
from searchrl.routing.routed_recordings import by_price, route_trajectory
from searchrl.stage.config import CONFIG_JSON_ENV, STAGES, ModelConfig, stage_package
from searchrl.tiny_policy.model import save_chat_tokenizer
from searchrl.tiny_policy.original_templates import original_template, save_original_template_tokenizer
from searchrl.tiny_policy.qwen3_stand_in import save_qwen3_style_tokenizer

RECORDINGS = EXAMPLES / "bamboogle_llama_sample.jsonl"
# The flags a CPU cannot honour (GPU placement, batch sizes of thousands of episodes) get small
# values; the ones that shape an episode (data.max_len, rollout.max_new_tokens, temperature, top_p,
# micro-batch sizes, the estimator, the agent file) stay the stage's. Overrides on the command line win.
SAMPLES_PER_PROMPT = 2
CPU_SCALE = {
    "actor.num_nodes": 1,
    "actor.num_gpus_per_node": 1,
    "ref.num_nodes": 1,
    "ref.num_gpus_per_node": 1,
    "vllm.num_engines": 2,
    "critic.num_nodes": 1,
    "critic.num_gpus_per_node": 1,
}


def _override_value(overrides: list[str], key: str) -> str | None:
    found = [o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}=")]
    return found[-1] if found else None


def _healthy_servers(stage_name: str, model: str | None, overrides: list[str]) -> bool:
    """Whether the configured servers answer and the reward server scores this stage's reward."""
    stage = plan_stage(stage_name, model, overrides)["stage"]
    checks = preflight.check_servers(stage, RUNS / "servers", timeout_s=2.0)
    return all(c.ok for c in checks) and any(c.name == "reward spec equal" for c in checks)


def _prepare(
    stage_dir: Path,
    stage: str,
    model_config: str,
    prompts: int,
    router: RouterConfig | None = None,
    package: str = "",
    protocol: str = "r1-searcher",
    overrides: tuple[str, ...] = (),
) -> tuple[Path, Path]:
    """The stage's prompt data, made by its own data preparation from the recorded questions, and
    the recordings keyed by the prompt the policy sees (for a routing stage, queries naming pool models; for a
    stage in another protocol, the R1-Searcher trajectories written in its tags)."""
    records = [json.loads(line) for line in RECORDINGS.open(encoding="utf-8")]
    if prompts > len(records):
        raise ConfigError(f"--episodes: at most {len(records)} prompts are recorded ({RECORDINGS.name})")
    chosen = records[:prompts]
    questions = stage_dir / "questions.jsonl"
    questions.write_text(
        "".join(json.dumps({"question": r["question"], "answer": r["answer"]}) + "\n" for r in chosen)
    )
    data = stage_dir / "prompts.jsonl"
    cmd = searchrl_command("data", "prepare", prepare_name(package or stage_package(stage)))
    cmd += ["--input", str(questions), "--out", str(data)]
    cmd += ["--model", model_config, "--config", str(CONFIGS / "stages" / f"{stage}.yaml")]
    # The command line's stage keys too (protocol=, reward.protocol=, episode.*): the prompts are the stage's as run.
    cmd += ["--keep-leaked", "--keep-duplicates", *(o for o in overrides if not o.startswith("openrlhf."))]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"data preparation failed: {done.stderr[-2000:]}")
    by_question = {json.loads(line)["question"]: json.loads(line)["prompt"] for line in data.open(encoding="utf-8")}
    replaying = replay_protocol(protocol, model_config)
    recordings = {
        by_question[r["question"]]: (
            route_trajectory(
                r["gen_text_store"], by_price(router), router.naming == "router_r1", get_protocol(protocol)
            )
            if router
            else replaying.from_r1_searcher(r["gen_text_store"])
        )
        for r in chosen
    }
    rec = stage_dir / "recordings.json"
    rec.write_text(json.dumps(recordings))
    return data, rec


def replay_protocol(protocol: str, model_file: str) -> TagProtocol:
    """The protocol the recordings are replayed in: bound to the policy's chat template where it is a chat model
    whose tokenizer loads here (the tool-call protocol writes each family's own calls), as it is otherwise."""
    from transformers import AutoTokenizer

    model = load(ModelConfig, model_file)
    if model.kind != "chat":
        return get_protocol(protocol)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model.tokenizer, local_files_only=True)
    except OSError:
        return get_protocol(protocol)
    return bind_template(get_protocol(protocol), tokenizer, model.chat_template_kwargs)


def call_form(protocol: TagProtocol) -> str | None:
    """The name of the call form a bound tool-call protocol reads; None for a protocol with tags of its own."""
    form = getattr(protocol, "form", None)
    return None if form is None else str(form.name)


def stand_in_chat_model(model_file: str, stage_dir: Path, protocol: str = "r1-searcher") -> str | None:
    """For a chat policy whose tokenizer cannot be fetched here, a copy of its model config rendering the
    chat prompts with a tiny tokenizer (the job's engine replays recordings anyway) that carries the checkpoint's
    original chat template where examples/chat_templates/ has it, else a ChatML or Qwen3-shaped one written here;
    None when the policy is not a chat model or its tokenizer loads."""
    import yaml
    from transformers import AutoTokenizer

    model = load(ModelConfig, model_file)
    if model.kind != "chat":
        return None
    if Path(model.tokenizer).exists():
        return None
    try:  # the local Hugging Face cache only: no network here, and retries would cost a minute
        AutoTokenizer.from_pretrained(model.tokenizer, local_files_only=True)
        return None
    except OSError:
        pass
    stage_dir.mkdir(parents=True, exist_ok=True)
    texts = [line for line in RECORDINGS.read_text(encoding="utf-8").splitlines()]
    # A config that switches thinking, or a protocol that calls tools, needs a template that reads the switch and
    # renders tools: Qwen3's shape, not Qwen2.5's plain ChatML.
    thinking = "enable_thinking" in model.chat_template_kwargs or get_protocol(protocol).TOOLS is not None
    if (original := original_template(model.tokenizer)) is not None:
        tokenizer = save_original_template_tokenizer(stage_dir / "chat_tokenizer", original, texts)
        shape = f"its original template, {original.name}"
    else:
        save = save_qwen3_style_tokenizer if thinking else save_chat_tokenizer
        tokenizer = save(stage_dir / "chat_tokenizer", texts)
        shape = "a Qwen3-shaped template" if thinking else "a ChatML template"
    data = {**model.model_dump(), "tokenizer_path": str(tokenizer)}
    out = stage_dir / "model.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    print(
        f"[rehearse] {model.tokenizer}: not available here; chat prompts rendered by a tiny tokenizer with {shape}",
        flush=True,
    )
    return str(out)


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'#':>3}  {'question':<44}{'searches':>9}{'tokens':>7}{'cut':>5}{'reward':>8}{'score':>7}  answered"]
    for i, r in enumerate(rows, start=1):
        lines.append(
            f"{i:>3}  {r['question'][:42]:<44}{r['searches']:>9}{r['tokens']:>7}{'yes' if r['budget_cut'] else '':>5}"
            f"{r['reward']:>8.2f}{r['score']:>7.2f}  {'yes' if r['answered'] else 'no'}"
        )
    return "\n".join(lines)


def episode_overrides(
    stage_name: str, stage: str, model: str | None, overrides: list[str], n: int, prompts: int, stage_dir: Path
) -> tuple[str | None, list[str], Any, Path]:
    """The model (a chat stand-in where the policy's tokenizer is not here), the rehearsal's own overrides (its
    data, its scale, its folders), the stage's router config (None unless it routes) and the recordings file."""
    base = plan_stage(stage_name, model, ["init_from=null", *overrides])
    model_config = str(base["stage"].model)
    if (stand_in := stand_in_chat_model(model_config, stage_dir, base["stage"].protocol)) is not None:
        model = model_config = stand_in
    router = base["stage"].search.router if base["stage"].search.kind is LLMRouterBackend else None
    package = stage_package(base["stage"].stage)
    data, recordings = _prepare(
        stage_dir, stage, model_config, prompts, router, package, base["stage"].protocol, tuple(overrides)
    )
    scale = {
        **CPU_SCALE,
        "rollout.n_samples_per_prompt": n,
        "rollout.batch_size": prompts,
        "train.batch_size": prompts * n,
        # Micro-batches no larger than the rehearsal's few episodes (OpenRLHF refuses fewer batches than actors).
        **{
            key: min(int(base["stage"].openrlhf.get(key) or 1), prompts * n)
            for key in ("rollout.micro_batch_size", "train.micro_batch_size")
        },
        "data.prompt_dataset": str(data),
        "ckpt.output_dir": str(stage_dir / "final"),
        "ckpt.path": str(stage_dir / "ckpt"),
        "logger.tensorboard_dir": str(stage_dir / "tensorboard"),
    }
    # Every episode kept, by the job's own agent, in `episodes/` beside the rehearsal's TensorBoard folder.
    kept = [f"episodes.per_step={prompts * n}", "episodes.source=rehearsal"]
    local = ["init_from=null", *kept, *(f"openrlhf.{k}={v}" for k, v in scale.items())]
    return model, local, router, recordings


def start_servers(
    stage_name: str, model: str | None, overrides: list[str], local: list[str], router: Any, stage_dir: Path,
    started: list[Any],
) -> None:  # fmt: skip
    """What the episodes talk to, on loopback, unless healthy servers are already named: a routing stage's LLM pool,
    the retrieval server over the rehearsal index and a reward server on the stage's resolved config. Their URLs
    join `local`, the processes `started`."""
    if router is not None:
        # A routing stage's pool on loopback: canned answers to the rehearsal's questions, its prices.
        qa = [json.loads(line) for line in (stage_dir / "questions.jsonl").open(encoding="utf-8")]
        pool_proc, pool_url = start_loopback(router, qa, stage_dir)
        started.append(pool_proc)
        models = [m.model_dump() for m in repoint(router, pool_url).models]
        local.append(f"search.router.models={json.dumps(models)}")
        print(f"[rehearse] loopback LLM pool {pool_url} ({', '.join(m['name'] for m in models)})", flush=True)
    if _healthy_servers(stage_name, model, [*local, *overrides]):
        return
    if router is None:
        print("[rehearse] the rehearsal index (mini corpus + fictional people), built once", flush=True)
        index = rehearsal_index(REHEARSAL_DIR)
        port = free_port()
        serve = searchrl_command("search", "serve", "--index", str(index))
        started.append(start_command(serve, port, stage_dir / "retrieval.log", 180))
        local.append(f"search.urls=http://127.0.0.1:{port}")
        print(f"[rehearse] retrieval server :{port} (rehearsal index)", flush=True)
    reward_port = free_port()
    spec_file = stage_dir / "stage.json"
    spec_file.write_text(plan_stage(stage_name, model, [*local, *overrides])["stage"].model_dump_json())
    reward = searchrl_command("reward", "serve", "--resolved", str(spec_file))
    started.append(start_command(reward, reward_port, stage_dir / "reward.log"))
    local.append(f"reward_server.urls=http://127.0.0.1:{reward_port}")
    print(f"[rehearse] reward server :{reward_port}", flush=True)


def submit(head: Head, env: dict[str, Any], plan: dict[str, Any], episodes: int, recordings: Path, stage_dir: Path):
    """`ray job submit` of the rollout job, as a real submit uploads it plus the rehearsal code the job runs;
    returns the job's result line and the submit's exit."""
    cmd = [
        str(Path(sys.executable).parent / "ray"),
        "job",
        "submit",
        "--address",
        head.address,
        "--runtime-env-json",
        # The real submit's upload, plus the rehearsal code its job runs (searchrl.rehearsal.job).
        json.dumps(with_rehearsal_code(env)),
        "--",
        "python3",
        "-m",
        "searchrl.rehearsal.job",
        "--episodes",
        str(episodes),
        "--recordings",
        str(recordings),
        "--",
        *plan["train_args"],
    ]
    job_log = stage_dir / "job.log"
    print(f"[rehearse] ray job submit ... -- python3 -m searchrl.rehearsal.job (log {job_log})", flush=True)
    with job_log.open("w", encoding="utf-8") as log:
        done = subprocess.run(cmd, cwd=ROOT, env=head.env, stdout=log, stderr=subprocess.STDOUT, text=True)
    lines = job_log.read_text(encoding="utf-8").splitlines()
    found = [line.split(MARKER, 1)[1] for line in lines if MARKER in line]
    if not found:
        print("\n".join(lines[-60:]), file=sys.stderr)
        raise RuntimeError(f"the job printed no result (ray job submit exited {done.returncode}); see {job_log}")
    return json.loads(found[-1]), done.returncode


def run(stage_name: str, model: str | None, overrides: list[str], episodes: int) -> int:
    """The episode rehearsal of a stage (the module docstring): the table, then one JSON line; 0 when every
    check held."""
    stage = STAGES[stage_name]
    if not (Path(sys.executable).parent / "ray").is_file():
        print("error: the rehearsal needs Ray 2.55 with its job server: pip install -e '.[dev]'", file=sys.stderr)
        return 3
    stage_dir = REHEARSAL_DIR / stage
    stage_dir.mkdir(parents=True, exist_ok=True)
    # The last rehearsal's records would read as this one's.
    shutil.rmtree(stage_dir / EPISODES_DIR, ignore_errors=True)
    n = int(_override_value(overrides, "openrlhf.rollout.n_samples_per_prompt") or SAMPLES_PER_PROMPT)
    started: list[Any] = []
    head: Head | None = None
    t0 = time.monotonic()
    try:
        prompts = max(1, math.ceil(episodes / n))
        model, local, router, recordings = episode_overrides(
            stage_name, stage, model, overrides, n, prompts, stage_dir
        )
        start_servers(stage_name, model, overrides, local, router, stage_dir, started)
        plan = plan_stage(stage_name, model, [*local, *overrides])
        env = runtime_env(plan)
        print(f"[rehearse] preflight for {plan['stage'].stage}:", flush=True)
        preflight_ok = preflight.report(preflight.submission_checks(plan, env, REHEARSAL_DIR / "servers"))
        package = preflight.build_package(env, stage_dir / "package.zip")
        head = open_head(stage_dir)
        head.wait()
        print(f"[rehearse] Ray head {head.address} (log {head.log})", flush=True)
        job, exit_code = submit(head, env, plan, episodes, recordings, stage_dir)
    except (ConfigError, ValueError, RuntimeError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        if head is not None:
            head.stop()
        for proc in started:
            stop(proc)
    print(_table(job["rows"]))
    # Every episode as the policy wrote it and as it was paid: the texts stay out of the JSON line.
    episodes_file = stage_dir / "episodes.jsonl"
    with episodes_file.open("w", encoding="utf-8") as fh:
        for row in job["rows"]:
            record = {key: row.get(key) for key in ("prompt", "response", "label", "reward")}
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    summary = {
        "stage": stage,
        "protocol": plan["stage"].protocol,
        # The form the replayed calls were written in (the tool-call protocol bound to the policy's template).
        "call_form": call_form(replay_protocol(plan["stage"].protocol, str(plan["stage"].model))),
        "episodes_file": str(episodes_file),
        "episode_records": len(read_records(episode_files(stage_dir), {})),
        **{key: job[key] for key in ("episodes", "finished", "budget_cut", "scored", "mean_reward", "min_reward")},
        **{key: job[key] for key in ("extra_logs_keys_consistent", "experience_batches_ok", "train_micro_batches")},
        "package_mib": round(package.mib, 2),
        "package_files": len(package.files),
        "config_source": job["config_source"][0] if len(job["config_source"]) == 1 else job["config_source"],
        "preflight_ok": preflight_ok,
        "max_len": job["max_len"],
        "max_new_tokens": job["max_new_tokens"],
        "ray_job_exit": exit_code,
        "seconds": round(time.monotonic() - t0, 1),
    }
    if job.get("experience_error"):
        summary["experience_error"] = job["experience_error"]
    summary["ok"] = (
        job["episodes"] >= episodes
        and job["scored"] == job["episodes"]
        and job["extra_logs_keys_consistent"]
        and job["experience_batches_ok"]
        and job["config_source"] == ["env_vars"]
        and CONFIG_JSON_ENV in env["env_vars"]
        and package.bytes < preflight.RAY_PACKAGE_LIMIT
        and not package.data_files
        and preflight_ok
        and exit_code == 0
    )
    print(json.dumps(summary))
    return 0 if summary["ok"] else 1
