#!/usr/bin/env bash
# `cardgate probe` against real agents, as an operator runs it: wall time and peak RSS of the
# whole process (card fetch, signature check, one full probe cycle per protocol version with
# streaming, push via the inline webhook, and the push-config registration).
#
#   bench/probe-agents.sh          # 10 runs against each agent
#   RUNS=30 bench/probe-agents.sh
#
# Agents: the official SDKs' test agents (tests/agents/{python,js}, set up as in their READMEs;
# the Python one runs from $CARDGATE_TEST_PYTHON), and the fake agent switched into hostile
# behaviours (answers padded with 200 KiB, a stream that never ends, a webhook flood), to show
# that what an agent sends does not move cardgate's memory.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-10}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --quiet --release --bin cardgate --example fake-agent
BIN=$CARGO_TARGET_DIR/release
PYTHON=${CARDGATE_TEST_PYTHON:-tests/agents/python/.venv/bin/python}

. bench/lib.sh

# Starts an agent that prints `READY <origin>`; sets $ORIGIN.
start_ready() {
  local out; out=$(mktemp)
  "$@" >"$out" 2>/dev/null &
  pids+=($!)
  for _ in $(seq 1 300); do
    ORIGIN=$(sed -n 's/^READY //p' "$out" | head -n1)
    [ -n "$ORIGIN" ] && return 0
    sleep 0.1
  done
  echo "agent did not start: $*" >&2; return 1
}

# Runs the probe RUNS times; prints median and max wall time (ms), max peak RSS (MiB), exit code.
measure() {
  local label=$1 origin=$2; shift 2
  local walls=() rss=() code=0
  for _ in $(seq 1 "$RUNS"); do
    local stats; stats=$(mktemp)
    /usr/bin/time -f '%e %M' -o "$stats" "$BIN/cardgate" probe "$origin" --json \
      --allow-networks 127.0.0.0/8 "$@" >/dev/null 2>&1 || code=$?
    read -r secs kib < <(tail -n1 "$stats")
    walls+=("$(python3 -c "print(round($secs*1000))")")
    rss+=("$kib")
  done
  python3 - "$label" "$code" "${walls[*]}" "${rss[*]}" <<'PY'
import statistics, sys
label, code, walls, rss = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split()], [int(x) for x in sys.argv[4].split()]
print(f"{label:<44} wall median {statistics.median(walls):>6.0f} ms  max {max(walls):>6} ms   peak RSS max {max(rss)/1024:6.1f} MiB   exit {code}")
PY
}

echo "== cardgate probe, $RUNS runs each (release build; this machine: $(nproc) cores)"
if [ -x "$PYTHON" ]; then
  start_ready "$PYTHON" tests/agents/python/agent.py --port 0
  measure "Python SDK agent (a2a-sdk 1.3.0), 1.0 + 0.3" "$ORIGIN"
  start_ready "$PYTHON" tests/agents/python/agent.py --port 0 --grpc-only
  measure "Python SDK agent, 1.0 over gRPC only" "$ORIGIN" --binding grpc
  start_ready "$PYTHON" tests/agents/python/agent.py --port 0 --grpc-only --grpc-compression gzip
  measure "Python SDK agent, gRPC only, answers gzipped" "$ORIGIN" --binding grpc
else
  echo "(Python agent skipped: no $PYTHON)"
fi
if [ -d tests/agents/js/node_modules/@a2a-js/sdk ]; then
  start_ready node tests/agents/js/agent.mjs --port 0
  measure "JS SDK agent (@a2a-js/sdk 1.3.0), 1.0 + 0.3" "$ORIGIN"
  start_ready node tests/agents/js/agent.mjs --port 0 --grpc-only
  measure "JS SDK agent, 1.0 over gRPC only" "$ORIGIN" --binding grpc
else
  echo "(JS agent skipped: run npm ci in tests/agents/js)"
fi

fake() {
  local port; port=$(free_port)
  "$BIN/examples/fake-agent" --listen "127.0.0.1:$port" "$@" >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$port/.well-known/agent-card.json" >/dev/null 2>&1 && break; sleep 0.05; done
  ORIGIN="http://127.0.0.1:$port"
}
fake --behaviour conformant
measure "fake agent, conformant" "$ORIGIN"
fake --behaviour conformant --padding-bytes 204800
measure "fake agent, every answer padded 200 KiB" "$ORIGIN"
fake --behaviour never-finishes --streaming false --padding-bytes 204800
RUNS_SAVED=$RUNS; RUNS=3
measure "fake agent, padded + polled until deadline" "$ORIGIN" --deadline-secs 10
RUNS=$RUNS_SAVED
fake --behaviour push-flood
measure "fake agent, webhook flood (50x each delivery)" "$ORIGIN"
fake --behaviour conformant --grpc
measure "fake agent over gRPC, conformant" "$ORIGIN"
fake --behaviour conformant --grpc --padding-bytes 4194304
measure "fake agent over gRPC, 4 MiB messages (refused)" "$ORIGIN"
fake --behaviour endless-stream --grpc
measure "fake agent over gRPC, endless stream" "$ORIGIN"
