#!/usr/bin/env bash
# Start the retrieval and reward servers in the background, with logs and pid files, and wait
# until both answer /health. Servers this script started before are stopped first (and waited for); a
# port still in use is an error naming its process; runs/servers/<name>.json records pid and URL.
#   launch/start_servers.sh --index DIR [--stage stage1|stage2|...] [--search-port 8002] [--reward-port 8001]
#                           [--host 127.0.0.1] [--run-dir runs/servers]
#   launch/start_servers.sh stop [--run-dir runs/servers]
# Extra `key=value` arguments are stage-config overrides (e.g. reward.answer_metric=f1), as for ray_submit.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SEARCHRL_VENV:-$ROOT/.venv}"
PY="python3"; [ -x "$VENV/bin/python" ] && PY="$VENV/bin/python"
STAGE=stage1 INDEX="" SEARCH_PORT=8002 REWARD_PORT=8001 HOST=127.0.0.1 RUN_DIR="$ROOT/runs/servers" ACTION=start
OVERRIDES=()
usage() { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    stop) ACTION=stop ;;
    --index) INDEX="$2"; shift ;;
    --stage) STAGE="$2"; shift ;;
    --search-port) SEARCH_PORT="$2"; shift ;;
    --reward-port) REWARD_PORT="$2"; shift ;;
    --host) HOST="$2"; shift ;;
    --run-dir) RUN_DIR="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *=*) OVERRIDES+=("$1") ;;
    *) echo "error: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$RUN_DIR"

cd "$ROOT"
# Stops the server the pid file names and returns once it has exited, so its port is free for the next one.
stop_one() { "$PY" -m launch.server_process stop "$1" --run-dir "$RUN_DIR"; }
if [ "$ACTION" = stop ]; then stop_one retrieval; stop_one reward; exit 0; fi

# The stage set lives in searchrl/stage/config.py (resolved_config refuses another name, listing them); the
# reward server gets the resolved config the agent reads.
[ -n "$INDEX" ] || { echo "error: --index DIR is required (build one with searchrl index build)" >&2; exit 2; }
[ -f "$INDEX/manifest.json" ] || { echo "error: --index $INDEX has no manifest.json (an unfinished build?)" >&2; exit 2; }

RESOLVED="$RUN_DIR/$STAGE.resolved.json"
"$PY" -m searchrl.job.resolved_config "$STAGE" --out "$RESOLVED" ${OVERRIDES[@]+"${OVERRIDES[@]}"} >/dev/null \
  || { echo "error: --stage $STAGE: see above" >&2; exit 2; }
start_one() {  # name port command...
  local name="$1" port="$2"; shift 2
  stop_one "$name"
  # Nothing may listen on the port (a healthy answer there would not be ours); the error says whose it is.
  "$PY" -m launch.server_process check-port "$name" "$port" --host "$HOST" --run-dir "$RUN_DIR" || exit 1
  nohup "$@" --host "$HOST" --port "$port" >>"$RUN_DIR/$name.log" 2>&1 &
  echo $! >"$RUN_DIR/$name.pid"
  printf '{"name": "%s", "pid": %s, "url": "http://%s:%s", "stage": "%s", "index": "%s"}\n' \
    "$name" "$!" "$HOST" "$port" "$STAGE" "$INDEX" >"$RUN_DIR/$name.json"
  echo "[servers] $name: pid $!, http://$HOST:$port, log $RUN_DIR/$name.log"
}
start_one retrieval "$SEARCH_PORT" "$PY" -m search_backend.serve --index "$INDEX"
start_one reward "$REWARD_PORT" "$PY" -m reward_server --resolved "$RESOLVED"

wait_health() {  # name port
  for _ in $(seq 1 600); do
    if ! kill -0 "$(cat "$RUN_DIR/$1.pid")" 2>/dev/null; then
      echo "error: $1 exited; last log lines:" >&2; tail -n 20 "$RUN_DIR/$1.log" >&2; exit 1
    fi
    if "$PY" -c "import httpx,sys; sys.exit(httpx.get('http://$HOST:$2/health', timeout=2).status_code != 200)" \
      2>/dev/null; then
      # The port was free when ours started, so the answer is ours unless it has exited since.
      kill -0 "$(cat "$RUN_DIR/$1.pid")" 2>/dev/null \
        || { echo "error: $1 exited; last log lines:" >&2; tail -n 20 "$RUN_DIR/$1.log" >&2; exit 1; }
      echo "[servers] $1 healthy (pid $(cat "$RUN_DIR/$1.pid"))"; return 0
    fi
    sleep 0.5
  done
  echo "error: $1 did not answer /health within 300 s; see $RUN_DIR/$1.log" >&2; exit 1
}
wait_health retrieval "$SEARCH_PORT"
wait_health reward "$REWARD_PORT"
