"""launch/ray_submit.sh --dry-run, launch/start_servers.sh, the stage data preparation, the quickstart."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from searchrl.stage.config import stage_package
from searchrl.stage.openrlhf_flags import check_args
from tests.conftest import FIXTURES, ROOT

MODELS = ["configs/models/qwen2.5-7b-base.yaml", "configs/models/llama3.1-8b-instruct.yaml"]


def submit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "launch/ray_submit.sh", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


@pytest.mark.parametrize("stage", ["stage1", "stage2", "router_r1"])
@pytest.mark.parametrize("model", MODELS)
def test_dry_run_renders_a_command_openrlhf_parses(stage, model):
    # router_r1 is PPO by default (tests/test_router_r1.py); its REINFORCE++ alternative meets the checks below.
    extra = ["algorithm=reinforce++"] if stage == "router_r1" else []
    out = submit(stage, "--model", model, "--dry-run", "openrlhf.rollout.batch_size=32", *extra)
    assert out.returncode == 0, out.stderr
    cmd = shlex.split(out.stdout.strip().splitlines()[-1])
    assert cmd[:3] == ["ray", "job", "submit"]
    sep = cmd.index("--")
    assert cmd[sep + 1 : sep + 4] == ["python3", "-m", "openrlhf.cli.train_ppo_ray"]
    ns = vars(check_args(cmd[sep + 4 :]))  # OpenRLHF 0.11.2's own parser, types and choices included
    name = {"stage1": "stage1_format", "stage2": "stage2_answer", "router_r1": "router_r1"}[stage]
    assert ns["train.agent_func_path"] == f"{stage_package(name)}/agent_func.py"
    assert ns["algo.advantage.estimator"] == "reinforce_baseline"
    assert ns["rollout.n_samples_per_prompt"] == 16 and ns["rollout.batch_size"] == 32
    env = json.loads(cmd[cmd.index("--runtime-env-json") + 1])
    assert json.loads(env["env_vars"]["SEARCHRL_CONFIG_JSON"])["stage"] == name
    launch = json.loads((ROOT / f"configs/resolved/{name}.dry-run.json").read_text())
    if stage == "stage2":
        assert ns["actor.model_name_or_path"].endswith("runs/stage1_format/final")
        assert "final checkpoint of stage1_format" in launch["policy_source"]
    else:
        assert ns["actor.model_name_or_path"] in ("Qwen/Qwen2.5-7B", "meta-llama/Llama-3.1-8B-Instruct")


def test_stage2_can_start_elsewhere():
    out = submit("stage2", "--dry-run", "init_from=null")
    assert out.returncode == 0 and "--actor.model_name_or_path Qwen/Qwen2.5-7B" in out.stdout
    out = submit("stage2", "--dry-run", "openrlhf.actor.model_name_or_path=/ckpt/mine")
    assert "--actor.model_name_or_path /ckpt/mine" in out.stdout


@pytest.mark.parametrize(
    "override,message",
    [
        ("openrlhf.rollout.n_samples=4", "not flags of OpenRLHF 0.11.2's train_ppo_ray: rollout.n_samples"),
        ("openrlhf.rollout.batch_size=abc", "argument --rollout.batch_size: invalid int value: 'abc'"),
        ("openrlhf.algo.advantage.estimator=ppo2", "invalid choice: 'ppo2'"),
        ("reward.answer_metric=bleu", "reward.answer_metric"),
    ],
)
def test_bad_flags_are_named(override, message):
    out = submit("stage1", "--dry-run", override)
    assert out.returncode == 2 and message in out.stderr


def test_submit_without_servers_refuses():
    out = submit("stage1", "search.urls=http://127.0.0.1:9", "reward_server.urls=http://127.0.0.1:9")
    assert out.returncode == 1 and "preflight failed; nothing was submitted" in out.stderr
    assert "[FAIL] reward server healthy: http://127.0.0.1:9/health" in out.stdout
    assert "fix: start it: bash launch/start_servers.sh" in out.stdout


def test_start_servers_checks_its_arguments(tmp_path):
    run = ["bash", "launch/start_servers.sh"]
    assert subprocess.run([*run, "--help"], cwd=ROOT, capture_output=True).returncode == 0
    out = subprocess.run([*run, "--index", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and "no manifest.json" in out.stderr


def prepare(stage: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", f"{stage}.prepare_data", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_stage1_data_with_buckets(tmp_path):
    out = tmp_path / "s1.jsonl"
    res = prepare(
        "stage1_format",
        "--input",
        str(FIXTURES / "r1searcher/stage_1_head40.jsonl"),
        "--out",
        str(out),
        "--mix",
        "hard=0.5,medium=0.5",
        "--size",
        "10",
    )
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in out.open()]
    assert len(rows) == 10 and {r["bucket"] for r in rows} == {"hard", "medium"}
    assert all(r["prompt"].endswith("Assistant: <think>") and r["question"] in r["prompt"] for r in rows)
    report = json.loads(out.with_suffix(".report.json").read_text())
    assert report["written"] == 10 and report["buckets"] == {"hard": 5, "medium": 5}


def test_leakage_and_duplicates_are_reported(tmp_path):
    src = tmp_path / "in.jsonl"
    bamboogle = [json.loads(line) for line in (FIXTURES / "r1searcher/bamboogle.jsonl").open()][:3]
    rows = bamboogle + [{"question": "What is new here?", "answer": ["x", "y"]}] * 2
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "s2.jsonl"
    res = prepare("stage2_answer", "--input", str(src), "--out", str(out))
    assert res.returncode == 0, res.stderr
    report = json.loads(out.with_suffix(".report.json").read_text())
    assert report["leaked_into_eval_sets"] == {"bamboogle": 3} and report["duplicates"] == 1
    kept = [json.loads(line) for line in out.open()]
    assert len(kept) == 1 and json.loads(kept[0]["label"]) == ["x", "y"]
    res = prepare("stage2_answer", "--input", str(src), "--out", str(out), "--keep-leaked", "--keep-duplicates")
    assert sum(1 for _ in out.open()) == 5
    res = prepare("stage2_answer", "--input", str(src), "--out", str(out), "--question-key", "q")
    assert res.returncode == 2 and "needs keys 'q'" in res.stderr


@pytest.mark.parametrize("stage", ["stage1_format", "stage2_answer"])
def test_golds_that_cannot_be_read_are_refused_naming_the_record(tmp_path, stage):
    src = tmp_path / "in.jsonl"
    rows = [{"question": "Where is the Louvre?", "answer": "Paris"}, {"question": "Odd one?", "answer": '["a", 1]'}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = prepare(stage, "--input", str(src), "--out", str(tmp_path / "out.jsonl"))
    assert res.returncode == 2 and f"{src}: record 2: answer: " in res.stderr and "of type int" in res.stderr


@pytest.mark.parametrize("stage", ["stage1_format", "stage2_answer"])
def test_a_gold_that_normalises_to_nothing_is_left_out_and_counted_never_the_file(tmp_path, stage):
    """It would pay an empty answer: a row keeps its other golds, a row left with none is skipped, and the report
    names both (the whole file was refused before)."""
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = [
        {"question": "Where is the Louvre?", "answer": "Paris"},
        {"question": "Odd one?", "answer": "An"},
        {"question": "Capital of France?", "answer": ["Paris", "."]},
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = prepare(stage, "--input", str(src), "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert [json.loads(line)["label"] for line in out.open()] == ["Paris", "Paris"]
    report = json.loads(out.with_suffix(".report.json").read_text())
    assert report["empty_golds_dropped"] == {"records": 1, "first": [3]}
    assert report["skipped_without_gold"] == {"records": 1, "first": [2]} and report["written"] == 2


def test_rag_r1_data_is_rendered_with_its_multi_query_prompt(tmp_path):
    from searchrl.job import preflight
    from searchrl.stage.config import load_stage
    from searchrl.stage.templates import effective_model

    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"question": "Who wrote On the Origin of Species?", "answer": "Charles Darwin"}) + "\n")
    base = "configs/models/qwen2.5-7b-base.yaml"
    stage, _ = load_stage(ROOT / "configs/stages/rag_r1.yaml")
    model = effective_model(load_stage(ROOT / "configs/stages/stage2_answer.yaml")[1], stage)
    flags = {"data.input_key": "prompt", "data.label_key": "label"}
    with_prompt, plain = tmp_path / "rag.jsonl", tmp_path / "plain.jsonl"
    res = prepare("stage2_answer", "--input", str(src), "--out", str(with_prompt), "--model", base,
                  "--config", "configs/stages/rag_r1.yaml")  # fmt: skip
    assert res.returncode == 0, res.stderr
    row = json.loads(with_prompt.read_text())
    assert 'write up to 3 short queries separated by "," in one search, as <search>' in row["prompt"]
    check = preflight.check_data(stage, {**flags, "data.prompt_dataset": str(with_prompt)}, model, "rag_r1")[0]
    assert check.ok, check.detail
    # Data rendered with the model's own prompt would train a policy that never learns it may send several
    # queries: the preflight refuses it and says how to prepare it.
    assert prepare("stage2_answer", "--input", str(src), "--out", str(plain), "--model", base).returncode == 0
    check = preflight.check_data(stage, {**flags, "data.prompt_dataset": str(plain)}, model, "rag_r1")[0]
    assert not check.ok and "--config configs/stages/rag_r1.yaml" in check.fix


@pytest.mark.parametrize("module", ["searchrl.job.submit", "stage1_format.prepare_data", "stage2_answer.prepare_data"])
def test_help(module):
    out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and "usage:" in out.stdout


def test_quickstart_cpu_demo(tmp_path, mini_index):
    # A finished index in place: the quickstart's build finds it complete and reuses it.
    shutil.copytree(mini_index, tmp_path / "index")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.quickstart",
            "--cpu",
            "--out",
            str(tmp_path),
            "--episodes",
            "4",
            "--tiny-episodes",
            "1",
            "--max-length",
            "4096",
            # Training is the CI's `--train` rehearsal and the learning run; the demo alone here.
            "--train-steps",
            "0",
            # Options reach the CPU demo too (they were once ignored there).
            "episode.max_queries_per_block=2",
            "reward.process_weight=0.5",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "mode: CPU demo" in res.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["replay"]["episodes"] == 4 and summary["replay"]["queries_as_recorded"] == 4
    assert summary["replay"]["search_errors"] == 0
    assert summary["episode"]["max_queries_per_block"] == 2 and summary["reward"]["process_weight"] == 0.5
    episodes = [json.loads(line) for line in (tmp_path / "episodes.jsonl").open()]
    assert [e["mode"] for e in episodes].count("tiny-transformer") == 1
    replays = [e for e in episodes if e["mode"] == "replay"]
    assert all("<|begin_of_documents|>\n(1)" in e["solution"] for e in replays)
    # The outcome score is the format reward's 1.0; the process reward adds 0.5 per search that found a gold answer.
    assert all(e["score"] == 1.0 and "process_reward" in e["logs"] for e in replays)
    assert all(e["reward"] == 1.0 + e["logs"]["process_reward"] for e in replays)


def test_stage2_waits_for_stage1_to_be_ready(tmp_path):
    from tests.test_health import write_run

    logs = tmp_path / "tb"
    stage1 = tmp_path / "stage1.yaml"
    text = (ROOT / "configs/stages/stage1_format.yaml").read_text()
    final = tmp_path / "final"
    stage1.write_text(
        text.replace("runs/stage1_format/tensorboard", str(logs))
        .replace("runs/stage1_format/final", str(final))
        .replace(
            "model: configs/models/qwen2.5-7b-base.yaml", f"model: {ROOT / 'configs/models/qwen2.5-7b-base.yaml'}"
        )
    )
    args = [
        "stage2",
        "--dry-run",
        "--when-ready",
        f"init_from={stage1}",
        "--min-format-rate",
        "0.8",
        "--min-search-rate",
        "0.8",
        "--window",
        "5",
    ]
    out = submit(*args)
    assert out.returncode == 4 and "no logs yet" in out.stdout
    write_run(logs, [0.5] * 20, [0.9] * 20)  # searching, but the format is not there yet
    out = submit(*args)
    assert out.returncode == 4 and "'format_ok': 0.5" in out.stdout
    write_run(logs / "later", [0.95] * 30, [0.95] * 30)
    out = submit(*args)  # the curves are there, the final checkpoint is not: OpenRLHF writes it at the end
    assert out.returncode == 4 and "waiting for its final checkpoint" in out.stdout
    final.mkdir()
    (final / "config.json").write_text("{}")
    out = submit(*args)
    assert out.returncode == 0, out.stderr
    launch = json.loads((ROOT / "configs/resolved/stage2_answer.dry-run.json").read_text())
    assert launch["switch"]["ready"] and launch["switch"]["format_ok"] >= 0.8
    assert launch["switch"]["checkpoint_written"] and launch["policy"] == str(final)


def _pids(run_dir) -> dict[str, int]:
    return {name: int((run_dir / f"{name}.pid").read_text()) for name in ("retrieval", "reward")}


def test_servers_restart_cleanly_and_say_whose_process_holds_a_port(tmp_path, mini_index):
    """`searchrl servers start` while its own servers run restarts them every time (it stopped them and tested
    the port at once: 3 failures in 6); a port still taken is named as our own server's or another process'."""
    import socket

    from launch.server_process import cmdline
    from searchrl.process import free_port

    run_dir = tmp_path / "servers"
    search_port, reward_port = free_port(), free_port()

    def start(search: int = search_port, reward: int = reward_port) -> subprocess.CompletedProcess:
        args = ["--index", str(mini_index), "--search-port", str(search), "--reward-port", str(reward)]
        return subprocess.run(
            ["bash", "launch/start_servers.sh", *args, "--run-dir", str(run_dir)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )

    try:
        out = start()
        assert out.returncode == 0, out.stderr
        # One restart (two cost 15 s more of the suite's 10 minutes); the race it caught failed 3 starts in 6.
        for _ in range(1):
            before = _pids(run_dir)
            out = start()
            assert out.returncode == 0, out.stderr
            assert f"stopped retrieval (pid {before['retrieval']})" in out.stdout
            after = _pids(run_dir)
            assert all(cmdline(pid) is None for pid in before.values())  # the old ones exited
            assert all(cmdline(pid) for pid in after.values()) and set(after.values()).isdisjoint(before.values())
        # The retrieval server asked onto the port our own reward server holds:
        reward_pid = _pids(run_dir)["reward"]
        out = start(search=reward_port)
        assert out.returncode == 1
        assert f"held by our own reward server (pid {reward_pid}" in out.stderr, out.stderr
        # ... and onto a port a process of someone else's listens on:
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            other.listen()
            out = start(search=other.getsockname()[1])
        assert out.returncode == 1
        assert f"in use by another process, not a server this script started (pid {os.getpid()}" in out.stderr
    finally:
        subprocess.run(["bash", "launch/start_servers.sh", "stop", "--run-dir", str(run_dir)], cwd=ROOT, timeout=120)
    assert not (run_dir / "reward.pid").exists()


# A stand-in for a server that takes a while to exit after SIGTERM (draining its requests) and holds its port
# until then; the command line names the retrieval server's module, as start_servers.sh's pid file records.
SLOW_TO_EXIT = """
import signal, socket, sys, time
listener = socket.socket()
listener.bind(("127.0.0.1", int(sys.argv[1])))
listener.listen()
signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1.5), sys.exit(0)))
print("listening", flush=True)
while True:
    time.sleep(0.05)
"""


def test_stop_waits_until_the_server_has_exited_and_never_signals_a_stranger(tmp_path):
    from launch.server_process import cmdline, main, port_owner_message
    from searchrl.process import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_TO_EXIT, str(port), "search_backend.serve"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "listening"
        (tmp_path / "retrieval.pid").write_text(str(proc.pid))
        assert port_owner_message("127.0.0.1", port, "reward", tmp_path).startswith(
            f"127.0.0.1:{port} is held by our own retrieval server (pid {proc.pid}"
        )
        assert main(["stop", "retrieval", "--run-dir", str(tmp_path)]) == 0
        assert cmdline(proc.pid) is None  # returned only once the process had exited ...
        assert port_owner_message("127.0.0.1", port, "retrieval", tmp_path) is None  # ... and the port is free
        assert not (tmp_path / "retrieval.pid").exists()
    finally:
        proc.kill()
        proc.wait()
    # A pid file whose pid now belongs to another program (here this test) is left alone, not signalled.
    (tmp_path / "reward.pid").write_text(str(os.getpid()))
    assert main(["stop", "reward", "--run-dir", str(tmp_path)]) == 0
    assert not (tmp_path / "reward.pid").exists()


def test_sigterm_runs_finally_blocks(tmp_path):
    """`kill` of a rehearsal stops its Ray head: SIGTERM exits through `finally`, as Ctrl-C does."""
    import signal
    import subprocess
    import sys
    import time

    flag = tmp_path / "stopped"
    code = (
        "import time\nfrom searchrl.process import exit_on_sigterm\nexit_on_sigterm()\n"
        f"try:\n    print('up', flush=True)\n    time.sleep(60)\nfinally:\n    open({str(flag)!r}, 'w').write('yes')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 128 + signal.SIGTERM and time.monotonic() - t0 < 20
    assert flag.read_text() == "yes"


def test_data_prepare_and_dry_run_work_from_any_folder(tmp_path):
    """A stage config's relative paths resolve from the checkout's root (else the config's own folder), never from
    the working folder: `searchrl data prepare stage2 --config` a shipped stage and `searchrl stage dry-run
    search_r1` run from a folder outside the checkout (both failed there before, the model config not found)."""
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"question": "Where is the Louvre?", "answer": "Paris"}) + "\n")
    searchrl = str(Path(sys.executable).parent / "searchrl")
    stage2 = ROOT / "configs/stages/stage2_answer.yaml"
    done = subprocess.run(
        [searchrl, "data", "prepare", "stage2", "--input", str(src), "--out", str(out), "--config", str(stage2)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(out.read_text())["prompt"].endswith("<think>")
    done = subprocess.run([searchrl, "stage", "dry-run", "search_r1"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and "ray job submit" in done.stdout, done.stderr[-2000:]


def test_a_stage_configs_own_model_config_beside_it_is_found(tmp_path):
    from searchrl.stage.config import ROOT as CHECKOUT
    from searchrl.stage.config import load_stage

    (tmp_path / "mine.yaml").write_text((CHECKOUT / "configs/models/qwen2.5-7b-base.yaml").read_text())
    stage = tmp_path / "stage.yaml"
    stage.write_text((CHECKOUT / "configs/stages/stage1_format.yaml").read_text() + "\nmodel: mine.yaml\n")
    assert load_stage(stage)[1].name
