"""Every entry file the design or the README names runs as a script, exactly as a user types it from the checkout's
root: `python eval/run_local.py --help`. Run so, the script's own folder comes first on sys.path, where a module of
ours named like a package of ours (`eval/routing.py` and the old top-level `routing`) used to shadow it."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from searchrl.paths import ROOT

ENTRY_FILES = (
    "eval/run_bamboogle_online.py",
    "eval/run_local.py",
    "stage1_format/prepare_data.py",
    "stage2_answer/prepare_data.py",
    "stage_router_r1/prepare_data.py",
    "launch/quickstart.py",
)


def run_help(file: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, file, "--help"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )


@pytest.fixture(scope="module")
def helps() -> dict[str, subprocess.CompletedProcess]:
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(ENTRY_FILES, pool.map(run_help, ENTRY_FILES), strict=True))


@pytest.mark.parametrize("file", ENTRY_FILES)
def test_entry_file_runs_as_a_script(file, helps):
    done = helps[file]
    assert done.returncode == 0, f"python {file} --help: exit {done.returncode}\n{done.stderr[-3000:]}"
    assert done.stdout.startswith("usage:"), done.stdout[:500]


def test_no_entry_folder_holds_a_module_named_like_a_package_of_ours():
    """The mechanism behind the old crash, checked directly: nothing in a script's folder may share a name with a
    top-level package of ours, which the script would then import instead."""
    tops = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    for folder in {f.split("/")[0] for f in ENTRY_FILES}:
        names = {p.stem for p in (ROOT / folder).glob("*.py")} | {
            p.name for p in (ROOT / folder).iterdir() if p.is_dir()
        }
        assert not names & (tops - {folder}), f"{folder}/ shadows {sorted(names & tops)} when a script there runs"
