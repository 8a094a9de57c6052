"""The one command line, `searchrl`: every subcommand answers --help, a wrong word names the choices, every
target imports, and the installed console script runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from launch.cli import COMMANDS, GROUPS, target
from searchrl.paths import ROOT

# Each command's --help through launch.cli.main, in one interpreter: one start-up for all of them.
HELP_ALL = """
import argparse, json, os, sys, tempfile
from launch.cli import build_parser, main

# Every command and group the parser offers, read from its subparsers (not from a list of ours).
def walk(parser, words=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield " ".join((*words, name))
                yield from walk(sub, (*words, name))

out = {}
for key in walk(build_parser()):
    # Captured at the file descriptor: a target that printed its help from a child process is caught too.
    with tempfile.TemporaryFile(mode="w+") as buf:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(buf.fileno(), 1)
        try:
            code = main([*key.split(), "--help"])
        except SystemExit as e:
            code = e.code
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        buf.seek(0)
        out[key] = [code, buf.read()]
print(json.dumps(out))
"""


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "launch.cli", *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_every_subcommand_has_help():
    proc = subprocess.run([sys.executable, "-c", HELP_ALL], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(got) == {*GROUPS, *COMMANDS} and len(COMMANDS) >= 25
    for key, (code, text) in got.items():
        assert code in (0, None), f"searchrl {key} --help exited {code}"
        # The target's own help: its options, not an empty page.
        assert "--" in text and len(text.splitlines()) >= 3, f"searchrl {key} --help printed no help:\n{text}"
    # Every command names itself as the user typed it, not the module or script behind it.
    unnamed = {
        key: text.splitlines()[0] for key, (_, text) in got.items() if not text.startswith(f"usage: searchrl {key}")
    }
    assert not unnamed, unnamed
    # Each `searchrl stage` command has its own parser: it names itself and offers only its own options.
    own = {
        "stage submit": ("--address", "--when-ready"),
        "stage preflight": (),
        "stage dry-run": ("--address", "--when-ready"),
        "stage rehearse": ("--episodes", "--train", "--steps"),
    }
    others = {
        "--episodes",
        "--train",
        "--steps",
        "--when-ready",
        "--address",
        "--rehearse",
        "--dry-run",
        "--preflight",
    }
    for key, options in own.items():
        text = got[key][1]
        assert text.startswith(f"usage: searchrl {key} "), text[:200]
        shown = {o for o in others if f"{o} " in text or f"{o}\n" in text or f"[{o}]" in text}
        assert shown == set(options), (key, sorted(shown))


def test_top_level_help_lists_groups():
    proc = cli("--help")
    assert proc.returncode == 0
    for word in ("index", "search", "reward", "data", "stage", "servers", "eval", "health", "quickstart"):
        assert word in proc.stdout


def test_unknown_subcommand_exits_2_naming_the_choices():
    proc = cli("trian", "stage1")
    assert proc.returncode == 2
    assert "invalid choice: 'trian'" in proc.stderr and "'stage'" in proc.stderr and "'eval'" in proc.stderr
    proc = cli("stage", "sumbit", "stage1")
    assert proc.returncode == 2
    assert "'submit'" in proc.stderr and "'rehearse'" in proc.stderr
    proc = cli("stage")
    assert proc.returncode == 2 and "required" in proc.stderr


def test_ray_submit_picks_the_command_by_flag():
    """`launch/ray_submit.sh STAGE --rehearse|--preflight|--dry-run ...` is a thin alias of the `searchrl stage`
    commands, wherever the flag stands."""
    for flag, command in (
        ("--rehearse", "rehearse"),
        ("--preflight", "preflight"),
        ("--dry-run", "dry-run"),
        ("", "submit"),
    ):
        args = ["bash", "launch/ray_submit.sh", "stage1", *([flag] if flag else []), "--help"]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert proc.returncode == 0 and proc.stdout.startswith(f"usage: searchrl stage {command} "), proc.stdout[:200]


def test_arguments_reach_the_target_untouched():
    # searchrl.job.submit's own parser rejects a stage it does not know.
    proc = cli("stage", "dry-run", "stage3")
    assert proc.returncode == 2 and "invalid choice: 'stage3'" in proc.stderr
    # The SFT stage has no preflight: the old shared parser took `preflight sft` and submitted the job.
    proc = cli("stage", "preflight", "sft")
    assert proc.returncode == 2 and "invalid choice: 'sft'" in proc.stderr
    proc = cli("eval", "report", str(ROOT / "nonexistent"))
    assert proc.returncode == 2 and "no *.summary.json" in proc.stderr


def test_every_target_imports():
    for key, command in COMMANDS.items():
        assert callable(target(command)), key


def test_console_script_installed():
    script = Path(sys.executable).parent / "searchrl"
    assert script.exists(), "searchrl is not installed: run `bash launch/setup_env.sh`"
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "quickstart" in proc.stdout
