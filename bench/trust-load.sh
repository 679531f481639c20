#!/usr/bin/env bash
# Load benchmark of GET /v1/trust on both backends, next to a trivial axum JSON handler measured
# in the same run as the ceiling, and to the same binary's /healthz (the ratio issue 12 names). Needs wrk (Debian: apt-get install wrk) and, for the Postgres
# run, a server at $BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres).
#
#   bench/trust-load.sh            # 20 s per target, 2 wrk threads, 64 connections
#   DURATION=60s CONNECTIONS=128 bench/trust-load.sh
#   PROFILE=dist bench/trust-load.sh   # the shipped build (LTO) instead of release
#   PERF=1 bench/trust-load.sh     # also a perf profile of the server during each trust run
#   BENCH_RUST_LOG=info bench/trust-load.sh   # with the default access log (a line per request)
#   CEILING=0 PROFILE=dist bench/trust-load.sh # without the ceiling (not built: an LTO link less)
#   BACKENDS=sqlite CARDGATE_BIN=/tmp/old/cardgate bench/trust-load.sh   # another build, one backend
#
# What is measured: a promoted subject of a conformant fake agent, asked about by a caller holding
# a reader key, with `requires=streaming,pushNotifications`: the key checked against memory, the
# rate limiter, and the decision evaluated from the in-memory read model (no database access);
# once by `callee_id`, once by `card_url` (resolved from memory too), and both again with a
# track record and freshness asked for.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-20s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
PG_ADMIN=${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
TOKEN=bench-admin-token-0123456789abcdefghijklmnop
WORK=$(mktemp -d)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
PROFILE=${PROFILE:-release}   # PROFILE=dist measures the binary the image ships
CEILING=${CEILING:-1}
examples=(--example fake-agent)
[ "$CEILING" = 1 ] && examples+=(--example bench-ceiling)
cargo build --quiet --profile "$PROFILE" --bin cardgate "${examples[@]}"
BIN=$CARGO_TARGET_DIR/$PROFILE
CARDGATE_BIN=${CARDGATE_BIN:-$BIN/cardgate}   # an A/B run measures a copy of another build
BACKENDS=${BACKENDS:-sqlite postgres}

. bench/lib.sh

AGENT_PORT=$(free_port)
"$BIN/examples/fake-agent" --listen "127.0.0.1:$AGENT_PORT" > "$WORK/agent.log" 2>&1 &
pids+=($!)
wait_ready "http://127.0.0.1:$AGENT_PORT/.well-known/agent-card.json"

# CPU seconds (user+system) used so far by the given pids.
cpu_of() { local t=0 pid; for pid in "$@"; do t=$((t + $(awk '{print $14+$15}' "/proc/$pid/stat" 2>/dev/null || echo 0))); done; echo "scale=3; $t / $(getconf CLK_TCK)" | bc; }
# Requests wrk completed, from its summary.
requests_of() { awk '/requests in/ {print $1}' "$WORK/$1.txt"; }
report_cpu() { # label requests cpu_before cpu_after
  echo "$1 CPU: $(echo "scale=1; ($4 - $3) * 1000000 / $2" | bc) us/request"
}

run_wrk() { # name url [header]
  echo "--- $1"
  if [ -n "${3:-}" ]; then
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -H "$3" "$2" | tee "$WORK/$1.txt" | grep -E "requests in|Requests/sec|Latency |99%|Non-2xx|Socket errors"
  else
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$2" | tee "$WORK/$1.txt" | grep -E "requests in|Requests/sec|Latency |99%|Non-2xx|Socket errors"
  fi
}

bench_backend() { # name database_url
  local port url callee server
  port=$(free_port)
  DATABASE_URL=$2 CARDGATE_LISTEN="127.0.0.1:$port" CARDGATE_ADMIN_TOKEN=$TOKEN \
  CARDGATE_ALLOW_NETWORKS=127.0.0.0/8 CARDGATE_PUBLIC_URL="http://127.0.0.1:$port/" \
  CARDGATE_RATE_LIMIT_PER_SEC=10000000 CARDGATE_RATE_LIMIT_BURST=10000000 \
  CARDGATE_REFRESH_SCHEDULE=off RUST_LOG="${BENCH_RUST_LOG:-warn}" \
    "$CARDGATE_BIN" serve > "$WORK/$1.log" 2>&1 &
  server=$!
  pids+=($!)
  wait_ready "http://127.0.0.1:$port/readyz"
  url="http://127.0.0.1:$port"
  callee=$(register_promoted "$url" "$TOKEN" "http://127.0.0.1:$AGENT_PORT")
  # Callers ask with a reader key, as they would in production: one key lookup per request.
  reader=$(curl -fsS -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' \
    -d '{"name":"bench","role":"reader"}' "$url/v1/keys" | python3 -c 'import sys,json; print(json.load(sys.stdin)["key"])')
  curl -fsS -H "Authorization: Bearer $reader" "$url/v1/trust?callee_id=$callee&caller_version=1.0&requires=streaming,pushNotifications" | head -c 300; echo
  local pg_before pg_after cg_before cg_after
  cg_before=$(cpu_of "$server"); pg_before=$(cpu_of $(pgrep -x postgres || true))
  if [ -n "${PERF:-}" ]; then # a CPU profile of the server during the run: PERF=1
    perf record -F 999 -g -o "$WORK/$1.perf" -p "$server" > /dev/null 2>&1 &
    perf_pid=$!
  fi
  run_wrk "$1" "$url/v1/trust?callee_id=$callee&caller_version=1.0&requires=streaming,pushNotifications" "Authorization: Bearer $reader"
  if [ -n "${PERF:-}" ]; then
    kill -INT "$perf_pid"; wait "$perf_pid" || true
    echo "top of the profile ($WORK/$1.perf):"
    perf report -i "$WORK/$1.perf" --no-children --sort dso,symbol 2>/dev/null | grep -E '^ +[0-9]' | head -"${PERF_TOP:-25}"
  fi
  cg_after=$(cpu_of "$server"); pg_after=$(cpu_of $(pgrep -x postgres || true))
  report_cpu cardgate "$(requests_of "$1")" "$cg_before" "$cg_after"
  if [ "$1" = postgres ]; then report_cpu "postgres (all backends)" "$(requests_of "$1")" "$pg_before" "$pg_after"; fi
  # The same question by card URL, as `cardgate can-i-trust --callee <url>` asks it.
  local card_url
  card_url=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "http://127.0.0.1:$AGENT_PORT")
  run_wrk "$1-card-url" "$url/v1/trust?card_url=$card_url&caller_version=1.0&requires=streaming,pushNotifications" "Authorization: Bearer $reader"
  # Both again asking for a track record and freshness (issue 46): evaluated afresh, not from
  # the rendered answers.
  local record="min_trials=3&min_clean_rate=0.5&max_age=86400"
  run_wrk "$1-record" "$url/v1/trust?callee_id=$callee&caller_version=1.0&requires=streaming,pushNotifications&$record" "Authorization: Bearer $reader"
  run_wrk "$1-card-url-record" "$url/v1/trust?card_url=$card_url&caller_version=1.0&requires=streaming,pushNotifications&$record" "Authorization: Bearer $reader"
  # The same binary's cheapest route, in the same run: the ceiling issue 12 measures against.
  run_wrk "$1-healthz" "$url/healthz"
  ratio "$1" "$1-healthz"
  ratio "$1-card-url" "$1-healthz"
  ratio "$1-record" "$1-healthz"
  ratio "$1-card-url-record" "$1-healthz"
}

rps_of() { awk '/Requests\/sec/ {print $2}' "$WORK/$1.txt"; }
p99_of() { awk '$1 == "99%" {print $2}' "$WORK/$1.txt"; }
ratio() { # trust_run healthz_run
  echo "== $1: /v1/trust $(rps_of "$1") req/s (p99 $(p99_of "$1")), /healthz $(rps_of "$2") req/s (p99 $(p99_of "$2")): ratio $(echo "scale=3; $(rps_of "$1") / $(rps_of "$2")" | bc)"
}

if [ "$CEILING" = 1 ]; then
  CEILING_PORT=$(free_port)
  "$BIN/examples/bench-ceiling" "127.0.0.1:$CEILING_PORT" > /dev/null 2>&1 &
  pids+=($!)
  wait_ready "http://127.0.0.1:$CEILING_PORT/v1/trust"
  run_wrk ceiling "http://127.0.0.1:$CEILING_PORT/v1/trust"
fi

PG_DB=cardgate_bench_$$
for backend in $BACKENDS; do
  case $backend in
    sqlite) bench_backend sqlite "sqlite://$WORK/bench.db" ;;
    postgres)
      psql "$PG_ADMIN" -qc "create database $PG_DB" >/dev/null
      bench_backend postgres "${PG_ADMIN%/*}/$PG_DB" ;;
    *) echo "unknown backend $backend (sqlite, postgres)" >&2; exit 2 ;;
  esac
done

cleanup
psql "$PG_ADMIN" -qc "drop database if exists $PG_DB with (force)" >/dev/null || true
echo "raw wrk output in $WORK"
