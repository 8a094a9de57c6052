"""The job a user submits, through the code path a real run takes (issue 10).

The package Ray 2.55 builds from the rendered runtime_env, the agent in OpenRLHF's own loop with a
vLLM-like engine and a Qwen-shaped tokenizer, OpenRLHF's experience batching, the masking of secrets,
the preflight against real servers. The full rehearsal through `ray job submit` runs in .ci/run.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from reward_server.app import ServerSettings, create_app
from search_backend.serve.app import ServerConfig
from search_backend.serve.app import create_app as create_search_app
from searchrl.job import preflight, submit
from searchrl.job.plan import excludes, plan_stage, runtime_env
from searchrl.protocols.r1_searcher import BEGIN_DOCS, END_DOCS
from searchrl.rehearsal.job import ReplayVllmEngine, install_vllm_standin
from searchrl.reward.scoring import score_solution
from searchrl.rollout.agent import Runtime, load_agent_executor, stage_from_env
from searchrl.rollout.engines import SamplingParams
from searchrl.rollout.environment import Episode, SearchEnvironment
from searchrl.search.base import SearchAuthError
from searchrl.search.http_client import HttpSearchBackend
from searchrl.stage.config import CONFIG_JSON_ENV, STAGES, load_stage, stage_package
from searchrl.stage.openrlhf_flags import check_args
from searchrl.stage.templates import render_prompt
from searchrl.tiny_policy.model import build_tokenizer
from tests.conftest import FIXTURES, ROOT, serve
from tests.test_search_fixtures import fixture_index

QUESTION = "Who carried out the 2009 Fort Hood shooting?"
SEARCH = "I should look this up. <|begin_of_query|> 2009 Fort Hood shooting <|end_of_query|>"
ANSWER = " The documents name the shooter. </think><answer> Nidal Hasan </answer>"
TRAJECTORY = f"{SEARCH}\n\n{BEGIN_DOCS}\n(1)recorded\n{END_DOCS}\n\n{ANSWER}"
STAGE2 = ROOT / "configs/stages/stage2_answer.yaml"


@pytest.fixture(scope="module")
def qwen_like():
    """A byte-level BPE with Qwen2's split, the protocol tags as plain text: `|>` merges with newlines."""
    texts = [json.loads(line)["gen_text_store"] for line in (FIXTURES / "r1searcher/bamboogle_llama.jsonl").open()]
    tok = build_tokenizer([*texts, TRAJECTORY, QUESTION], vocab_size=4000, protocol_tokens=False, qwen_split=True)
    merged = tok("<|end_of_query|>\n\n", add_special_tokens=False)["input_ids"]
    assert tok.decode(merged[-1:]) == "|>\n\n"  # the premise: one token completes the stop string and runs past it
    return tok


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    stage, _ = load_stage(STAGE2)
    scored = tmp_path_factory.mktemp("scored") / "scored.jsonl"
    with serve(create_search_app(ServerConfig(index_dir=fixture_index()))) as search_url:
        with serve(create_app(ServerSettings(spec=stage.reward, log_jsonl=scored))) as reward_url:
            yield search_url, reward_url, scored


async def episode(servers, tokenizer, max_length: int):
    search_url, reward_url, _ = servers
    stage, model_cfg = load_stage(STAGE2, [f"search.urls={search_url}", f"reward_server.urls={reward_url}"])
    prompt = render_prompt(model_cfg, QUESTION)
    engine = ReplayVllmEngine(tokenizer, {prompt: TRAJECTORY})
    runtime = Runtime.from_stage(stage)
    Runtime.install(runtime)
    try:
        executor = load_agent_executor(ROOT / "stage2_answer/agent_func.py")
        params = SamplingParams(temperature=1.0, top_p=0.95, max_tokens=None)
        return prompt, await executor.execute(prompt, "Nidal Hasan", params, max_length, tokenizer, engine)
    finally:
        Runtime.install(None)
        await runtime.rewards.aclose()
        await runtime.environment.search.aclose()


def test_scored_text_is_the_policys_context(servers, qwen_like):
    """Defect 7: the reward server scores exactly the tokens the policy saw, newlines included."""
    _, _, scored = servers
    scored.write_text("")
    prompt, result = asyncio.run(episode(servers, qwen_like, 4096))
    context = qwen_like.decode(result["observation_tokens"], skip_special_tokens=False).removesuffix("</s>")
    text = json.loads(scored.read_text().splitlines()[-1])["query"]
    assert text == context
    assert "<|end_of_query|>\n\n<|begin_of_documents|>\n(1)" in text
    assert float(result["extra_logs"]["budget_cut"]) == 0.0 and float(result["reward"]) == 1.0


@pytest.fixture
def vllm_standin():
    """The rehearsal job's vLLM stand-in for one test: the modules it adds, and OpenRLHF's trainer modules that bound
    it while it stood, leave sys.modules afterwards. Left in, a later test in the same worker generated through the
    stand-in's SamplingParams and waited forever for a segment that never came."""
    before = set(sys.modules)
    install_vllm_standin()
    yield
    for name in [n for n in sys.modules if n not in before]:
        if name.split(".")[0] == "vllm" or name.startswith("openrlhf.trainer"):
            del sys.modules[name]


def test_budget_cut_episode_is_scored_and_batches_split(servers, qwen_like, vllm_standin):
    """Defect 3: an episode OpenRLHF ends at data.max_len is scored (stage 2's penalty), logs the
    same keys as a finished one, and the two split in OpenRLHF's experience code."""
    from openrlhf.trainer.ppo_utils.experience import Experience, split_experience_batch
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    _, finished = asyncio.run(episode(servers, qwen_like, 4096))
    prompt, cut = asyncio.run(episode(servers, qwen_like, 300))
    assert len(qwen_like(prompt)["input_ids"]) < 300 < len(cut["observation_tokens"])  # cut after the documents
    samples = [
        SamplesGenerator._process_response_into_experience(None, r, max_len=300)  # type: ignore[arg-type]
        for r in (cut, finished)
    ]
    batch = Experience.concat_experiences(samples, qwen_like.pad_token_id)
    assert len(split_experience_batch(batch)) == 2
    assert float(cut["reward"]) == -2.0 and float(cut["scores"]) == 0.0
    assert sorted(cut["extra_logs"]) == sorted(finished["extra_logs"])
    assert float(cut["extra_logs"]["budget_cut"]) == 1.0


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory) -> Path:
    """The tracked files, plus what the README puts in the root: a 600 MiB index under indexes/,
    the KILT dump beside it (sparse files), runs/ and a venv."""
    clone = tmp_path_factory.mktemp("clone") / "searchrl"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    for big, size in [("indexes/kilt-bge/index.faiss", 600 << 20), ("kilt_knowledgesource.json", 1 << 30)]:
        (clone / big).parent.mkdir(parents=True, exist_ok=True)
        with (clone / big).open("wb") as fh:
            fh.truncate(size)
    (clone / "indexes/kilt-bge/manifest.json").write_text("{}")
    (clone / "runs/stage1_format/final").mkdir(parents=True)
    (clone / "runs/stage1_format/final/model.safetensors").write_bytes(b"0" * 1024)
    (clone / ".venv/lib").mkdir(parents=True)
    (clone / ".venv/lib/torch.so").write_bytes(b"0" * 1024)
    return clone


@pytest.mark.parametrize("stage", ["stage1", "stage2", "router_r1"])
def test_ray_package_holds_code_and_config_only(tmp_path, monkeypatch, fresh_clone, stage):
    """Defects 1 and 2: Ray 2.55's own packaging of the rendered runtime_env, in a clone with data in it."""
    clone = fresh_clone
    plan = plan_stage(stage, None, [])
    env = {**runtime_env(plan), "working_dir": str(clone), "excludes": excludes(clone)}
    report = preflight.build_package(env, tmp_path / "package.zip")
    agent = f"{stage_package(STAGES[stage])}/agent_func.py"
    assert agent in report.files and "searchrl/rollout/agent.py" in report.files
    assert report.bytes < 5 << 20 and not report.data_files
    assert not [f for f in report.files if f.startswith(("indexes/", "runs/", "kilt", ".venv", "configs/resolved"))]
    # The resolved config reaches a worker through env_vars alone: no file to find.
    monkeypatch.delenv("SEARCHRL_CONFIG", raising=False)
    for name, value in env["env_vars"].items():
        monkeypatch.setenv(name, value)
    assert stage_from_env() == plan["stage"]


def test_secrets_forwarded_and_masked(monkeypatch, capsys):
    """Defect 4: set tokens and keys reach env_vars; the printed command and the records show none."""
    monkeypatch.setenv("SEARCHRL_REWARD_TOKEN", "reward-secret-1")
    monkeypatch.setenv("SEARCHRL_SEARCH_TOKEN", "search-secret-2")
    monkeypatch.setenv("HF_TOKEN", "hf-secret-3")
    plan = plan_stage("stage1", None, ["openrlhf.logger.wandb.key=wandb-secret-4"])
    env = runtime_env(plan)
    assert env["env_vars"]["SEARCHRL_REWARD_TOKEN"] == "reward-secret-1"
    assert env["env_vars"]["SEARCHRL_SEARCH_TOKEN"] == "search-secret-2"
    assert env["env_vars"]["WANDB_API_KEY"] == "wandb-secret-4"
    # The flag names the variable, which the job's shell expands from env_vars.
    assert check_args(plan["train_args"]).__dict__["logger.wandb.key"] == "$WANDB_API_KEY"
    assert submit.dry_run_main(["stage1", "openrlhf.logger.wandb.key=wandb-secret-4"]) == 0
    shown = capsys.readouterr().out
    record = (ROOT / "configs/resolved/stage1_format.dry-run.json").read_text()
    for secret in ("reward-secret-1", "search-secret-2", "hf-secret-3", "wandb-secret-4"):
        assert secret not in shown and secret not in record
    assert '"SEARCHRL_REWARD_TOKEN": "***"' in shown


def test_refused_search_token_fails_fast():
    """Defect 4: a 401 from the retrieval server stops the episode with a clear error, instead of
    turning every search into a "The search failed" documents block."""
    from searchrl.stage.config import EpisodeConfig

    with serve(create_search_app(ServerConfig(index_dir=fixture_index(), token="right"))) as url:

        async def run() -> None:
            backend = HttpSearchBackend(url, retries=2, token="wrong")
            try:
                env = SearchEnvironment(backend, EpisodeConfig())
                await env.step(Episode(prompt="p", label="x"), "<|begin_of_query|> q <|end_of_query|>")
            finally:
                await backend.aclose()

        with pytest.raises(SearchAuthError, match="refused the credentials: HTTP 401"):
            asyncio.run(run())


def test_preflight_catches_mismatched_parts(tmp_path, monkeypatch):
    """Defect 5: a stage-1 reward server behind a stage-2 job, data prepared for another model, a
    missing starting checkpoint; /health is asked with the bearer token."""
    stage1, _ = load_stage(ROOT / "configs/stages/stage1_format.yaml")
    monkeypatch.setenv("SEARCHRL_REWARD_TOKEN", "tok")
    with serve(create_app(ServerSettings(spec=stage1.reward, token="tok"))) as reward_url:
        stage2, model = load_stage(STAGE2, [f"reward_server.urls={reward_url}", "search.backend=local"])
        checks = {c.name: c for c in preflight.check_servers(stage2, tmp_path)}
        assert checks["reward server healthy"].ok and checks["reward server token"].ok
        spec_check = checks["reward spec equal"]
        assert not spec_check.ok and "differing components: answer, format, search, violation" in spec_check.detail
        stage1_ok, _ = load_stage(
            STAGE2,
            [
                f"reward_server.urls={reward_url}",
                "search.backend=local",
                *[
                    f"reward.{k}={v}"
                    for k, v in (
                        ("answer_weight", 0.0),
                        ("search_weight", 0.5),
                        ("format_weight", 0.5),
                        ("violation_penalty", 0.0),
                    )
                ],
            ],
        )
        assert all(c.ok for c in preflight.check_servers(stage1_ok, tmp_path))
    monkeypatch.setenv("SEARCHRL_REWARD_TOKEN", "wrong")
    with serve(create_app(ServerSettings(spec=stage2.reward, token="tok"))) as reward_url:
        stage2b, _ = load_stage(STAGE2, [f"reward_server.urls={reward_url}", "search.backend=local"])
        checks = {c.name: c for c in preflight.check_servers(stage2b, tmp_path)}
        assert not checks["reward server token"].ok or not checks["reward server healthy"].ok

    data = tmp_path / "s2.jsonl"
    src = FIXTURES / "r1searcher/stage_1_head40.jsonl"
    other = tmp_path / "other.yaml"
    other.write_text("name: other-base\nkind: base\nmodel_path: x/y\ntemplate: 'Q: {question}\\nA: <think>'\n")
    cmd = [sys.executable, "-m", "stage2_answer.prepare_data", "--input", str(src), "--out", str(data)]
    assert subprocess.run([*cmd, "--model", str(other)], cwd=ROOT, capture_output=True).returncode == 0
    flags = {"data.prompt_dataset": str(data), "data.input_key": "prompt", "data.label_key": "label"}
    (check,) = preflight.check_data(stage2, flags, model, "stage2")
    assert not check.ok and "other-base" in check.detail and "prepare_data" in check.fix
    assert subprocess.run([*cmd, "--model", str(ROOT / stage2.model)], cwd=ROOT, capture_output=True).returncode == 0
    assert preflight.check_data(stage2, flags, model, "stage2")[0].ok

    (check,) = preflight.check_checkpoint(str(tmp_path / "final"), "final checkpoint of stage1_format")
    assert not check.ok and "--when-ready" in check.fix
    (tmp_path / "final").mkdir()
    (tmp_path / "final/config.json").write_text("{}")
    assert preflight.check_checkpoint(str(tmp_path / "final"), "final checkpoint of stage1_format")[0].ok


def test_start_servers_refuses_a_port_held_by_another_process(tmp_path):
    """Defect 5: start_servers.sh no longer reports someone else's server as its own."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        out = subprocess.run(
            [
                "bash",
                "launch/start_servers.sh",
                "--index",
                str(fixture_index()),
                "--search-port",
                str(port),
                "--run-dir",
                str(tmp_path),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 1 and f"127.0.0.1:{port} is in use" in out.stderr
    assert not (tmp_path / "retrieval.pid").exists()


@pytest.mark.parametrize(
    "spec,solution,score",
    [
        ("stage2", "x </think><answer> wrong </answer>", 0.0),
        ("stage2", "x </think><answer> Nidal Hasan </answer>", 1.0),
        ("stage1", "x </think><answer> wrong </answer>", 0.0),  # well formed but no search
        (
            "stage1",
            f"<|begin_of_query|> q <|end_of_query|>\n\n{BEGIN_DOCS}\n(1)d\n{END_DOCS}\n\n"
            "y </think><answer> wrong </answer>",
            1.0,
        ),
    ],
)
def test_scores_are_correctness(spec, solution, score):
    """Defect 6: dynamic filtering averages correctness, not a rescaled reward (a well-formed wrong
    stage-2 answer scored 2/3 before, so all-wrong groups passed the filter)."""
    stage, _ = load_stage(STAGE2 if spec == "stage2" else ROOT / "configs/stages/stage1_format.yaml")
    assert score_solution(solution, ["Nidal Hasan"], stage.reward, {"num_searches": 1}).score == score


@pytest.mark.parametrize("stage", ["stage1", "stage2"])
def test_r1searcher_defaults_and_prefix_caching(stage):
    """Defect 8: vLLM prefix caching on, R1-Searcher's top_p and no warm-up."""
    ns = vars(check_args(plan_stage(stage, None, [])["train_args"]))
    assert ns["vllm.enable_prefix_caching"] is True
    assert ns["rollout.top_p"] == 0.95 and ns["actor.lr_warmup_ratio"] == 0.0
    if stage == "stage1":  # the README's recipe: 320 prompts / 64 a step x 10 passes = 50 rollout steps
        assert ns["train.num_episodes"] == 10 and ns["rollout.batch_size"] == 64


def test_dry_run_keeps_the_launch_record_and_missing_ray_is_explained(tmp_path, monkeypatch, capsys):
    """`--dry-run` never overwrites what was launched; without Ray the fix is named."""
    record = ROOT / "configs/resolved/stage1_format.launch.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    before = record.read_text() if record.exists() else None
    record.write_text('{"launched": true}')
    try:
        assert submit.dry_run_main(["stage1"]) == 0
        assert record.read_text() == '{"launched": true}'
        assert json.loads((record.parent / "stage1_format.dry-run.json").read_text())["stage"] == "stage1_format"
    finally:
        if before is None:
            record.unlink()
        else:
            record.write_text(before)
    capsys.readouterr()
    monkeypatch.setenv("PATH", str(tmp_path))  # no `ray` on it, nor beside the interpreter below
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    servers = ["search.urls=http://127.0.0.1:9", "reward_server.urls=http://127.0.0.1:9"]
    assert submit.preflight_main(["stage1", *servers]) == 1
    shown = capsys.readouterr().out
    assert "[FAIL] ray CLI" in shown and "bash launch/install_gpu.sh" in shown


def test_the_environments_own_ray_is_found_without_activating_it(tmp_path, monkeypatch):
    """`.venv/bin/searchrl stage preflight` from a shell whose PATH lacks .venv/bin: `ray` beside the interpreter is
    the one checked and run (it failed as 'not on PATH' before)."""
    from searchrl.job.preflight import check_ray_cli
    from searchrl.process import own_tool

    bin_dir = tmp_path / "venv/bin"
    bin_dir.mkdir(parents=True)
    ray = bin_dir / "ray"
    ray.write_text("#!/bin/sh\n")
    ray.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert own_tool("ray") == str(ray)
    check = check_ray_cli()
    assert check.ok and check.detail == str(ray)
    ray.unlink()
    assert own_tool("ray") is None and not check_ray_cli().ok


def test_config_inline_wins_over_a_missing_file(monkeypatch):
    stage, _ = load_stage(STAGE2)
    monkeypatch.setenv("SEARCHRL_CONFIG", "/no/such/file.json")
    monkeypatch.setenv(CONFIG_JSON_ENV, stage.model_dump_json())
    assert stage_from_env() == stage


def test_openrlhf_post_parse_checks_run(capsys):
    """The rendered flags go through the checks train_ppo_ray makes after parsing, before Ray starts."""
    assert submit.dry_run_main(["stage1", "openrlhf.rollout.n_samples_per_prompt=1"]) == 2
    assert "requires n_samples_per_prompt > 1" in capsys.readouterr().err


def test_openrlhf_checks_run_without_importing_torch():
    """A dry run checks the flags with OpenRLHF's own code but imports neither torch nor transformers (the
    check's `hierarchize` comes from a stdlib-only module whose package __init__ imports both)."""
    code = (
        "import sys; from searchrl.job import submit; rc = submit.dry_run_main(['stage1']); "
        "heavy = sorted(m for m in ('torch', 'transformers', 'openrlhf.utils') if m in sys.modules); "
        "print(rc, heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "0 []", out.stderr[-2000:]
    bad = code.replace("['stage1']", "['stage1', 'openrlhf.rollout.n_samples_per_prompt=1']")
    out = subprocess.run([sys.executable, "-c", bad], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "2 []" and "requires n_samples_per_prompt > 1" in out.stderr
