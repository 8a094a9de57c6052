#!/usr/bin/env bash
# Creates the local virtual environment and installs searchrl into it, idempotently: a stamp of the
# install inputs makes a second run a no-op. torch is pinned to the CPU build first so that
# resolving sentence-transformers never pulls CUDA wheels on a CPU machine; then OpenRLHF 0.11.2 without
# its GPU dependencies and DeepSpeed 0.19.6 (its pin) built without ops, for the CPU training rehearsal.
# Usage: source launch/setup_env.sh [extras]   (default extras: dev)
set -euo pipefail
SEARCHRL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SEARCHRL_VENV="${SEARCHRL_VENV:-$SEARCHRL_ROOT/.venv}"
SEARCHRL_EXTRAS="${1:-dev}"
TORCH_SPEC="${SEARCHRL_TORCH:-torch==2.13.0}"
OPENRLHF_SPEC="openrlhf==0.11.2"
DEEPSPEED_SPEC="deepspeed==0.19.6"

if [ ! -x "$SEARCHRL_VENV/bin/python" ]; then
  echo "[setup] creating $SEARCHRL_VENV"
  "${PYTHON:-python3}" -m venv "$SEARCHRL_VENV"
fi
PY="$SEARCHRL_VENV/bin/python"
stamp="$SEARCHRL_VENV/.searchrl-setup"
want="$(cat "$SEARCHRL_ROOT/pyproject.toml" "$SEARCHRL_ROOT/launch/setup_env.sh" | sha256sum | cut -c1-16)-$SEARCHRL_EXTRAS"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing searchrl[$SEARCHRL_EXTRAS] into $SEARCHRL_VENV (log: $SEARCHRL_VENV/setup.log)"
  # A line per install, and one every 15 s while an install runs with pip's latest line (the project's own takes
  # over a minute), so set-up is never silent for long.
  pipi() {
    local log="$SEARCHRL_VENV/setup.log" start=$SECONDS next=15 pid
    echo "[setup] pip install ${*: -1}"
    "$PY" -m pip install "$@" >>"$log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
      sleep 1
      # By the clock, not by loop turns; pip's progress bars redraw with carriage returns, so only the text after
      # the last one, printable ASCII only (a bar cut mid-character held a line back once).
      if [ $((SECONDS - start)) -ge "$next" ]; then
        echo "[setup]   $((SECONDS - start)) s: $(tail -n 1 "$log" | tr '\r' '\n' | tail -n 1 | LC_ALL=C tr -cd '[:print:]' | cut -c1-100)"
        next=$((next + 15))
      fi
    done
    if ! wait "$pid"; then
      tail -n 30 "$log" >&2
      echo "[setup] pip install $* failed" >&2
      exit 1
    fi
  }
  if ! "$PY" -c "import torch" 2>/dev/null; then
    pipi "$TORCH_SPEC"
  fi
  # The training rehearsal runs OpenRLHF's own train_ppo_ray, which imports DeepSpeed (OpenRLHF's pin).
  # It ships as an sdist: built against the torch installed here (no isolated build env, which would
  # fetch a CUDA torch) and without prebuilt ops. Installed right after torch, so that its CPU FusedAdam (about
  # 40 s of C++ on first use) compiles in the background while the rest installs: the first training job finds
  # it built, and one that starts before the build ends waits on its lock.
  if ! "$PY" -c "import deepspeed" 2>/dev/null; then
    export DS_BUILD_OPS=0
    pipi --no-build-isolation "$DEEPSPEED_SPEC"
    unset DS_BUILD_OPS
  fi
  PYTHONPATH="$SEARCHRL_ROOT" nohup "$PY" -m searchrl.rehearsal.cpu.prebuild >>"$SEARCHRL_VENV/prebuild.log" 2>&1 &
  pipi -e "$SEARCHRL_ROOT[$SEARCHRL_EXTRAS]"
  # OpenRLHF's agent classes and its train_ppo_ray parser are the contract we test against; without
  # its GPU dependencies it installs in seconds. A GPU node installs it fully through the `train` extra.
  if ! "$PY" -c "import openrlhf" 2>/dev/null; then
    pipi --no-deps "$OPENRLHF_SPEC"
  fi
  "$PY" -c "import torch, fastapi, faiss, sentence_transformers, openrlhf, torch_geometric, deepspeed, peft" \
    || { echo "[setup] install incomplete: see the pip output above" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
export SEARCHRL_ROOT SEARCHRL_VENV PY
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
