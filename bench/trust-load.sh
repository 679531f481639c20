#!/usr/bin/env bash
# Load benchmark of GET /v1/trust on both backends, next to a trivial axum JSON handler measured
# in the same run as the ceiling, and to the same binary's /healthz (the ratio issue 12 names). Needs wrk (Debian: apt-get install wrk) and, for the Postgres
# run, a server at $BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres).
#
#   bench/trust-load.sh            # 20 s per target, 2 wrk threads, 64 connections
#   ROUNDS=5 DURATION=5s CEILING=0 bench/trust-load.sh   # five interleaved rounds, medians
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
# track record and freshness asked for. Each is reported as a ratio to /healthz in the same
# round, with cardgate's CPU per request (less sensitive to the machine's other load).
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
ROUNDS=${ROUNDS:-1}
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
  local card_url record query
  # The same question by card URL, as `cardgate can-i-trust --callee <url>` asks it (by the
  # agent's origin: another spelling than the one registered), and both again asking for a
  # track record and freshness (issue 46).
  card_url=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "http://127.0.0.1:$AGENT_PORT")
  record="min_trials=3&min_clean_rate=0.5&max_age=86400"
  query="caller_version=1.0&requires=streaming,pushNotifications"
  declare -A target=(
    [id]="$url/v1/trust?callee_id=$callee&$query"
    [card-url]="$url/v1/trust?card_url=$card_url&$query"
    [id-record]="$url/v1/trust?callee_id=$callee&$query&$record"
    [card-url-record]="$url/v1/trust?card_url=$card_url&$query&$record"
    [healthz]="$url/healthz"
  )
  local order=(id card-url id-record card-url-record healthz) round i name run cg_before
  # Every round runs each target once, the order turned by one a round, so that a quiet or
  # busy stretch of a shared machine falls on every target alike; each round's ratios compare
  # runs seconds apart.
  for round in $(seq 1 "$ROUNDS"); do
    [ "$ROUNDS" -gt 1 ] && echo "-- round $round"
    for i in "${!order[@]}"; do
      name=${order[$(( (i + round - 1) % ${#order[@]} ))]}
      run="$1-$name-$round"
      cg_before=$(cpu_of "$server")
      if [ -n "${PERF:-}" ] && [ "$round" = 1 ] && [ "$name" != healthz ]; then
        perf record -F 999 -g -o "$WORK/$run.perf" -p "$server" > /dev/null 2>&1 &
        perf_pid=$!
      fi
      if [ "$name" = healthz ]; then run_wrk "$run" "${target[$name]}"; else run_wrk "$run" "${target[$name]}" "Authorization: Bearer $reader"; fi
      if [ -n "${PERF:-}" ] && [ "$round" = 1 ] && [ "$name" != healthz ]; then
        kill -INT "$perf_pid"; wait "$perf_pid" || true
        echo "top of the profile ($WORK/$run.perf):"
        perf report -i "$WORK/$run.perf" --no-children --sort dso,symbol 2>/dev/null | grep -E '^ +[0-9]' | head -"${PERF_TOP:-25}"
      fi
      echo "$(cpu_of "$server") $cg_before" > "$WORK/$run.cpu"
    done
  done
  summary "$1"
}

# Per target: requests/s, ratio to the same round's /healthz, and cardgate's CPU per request,
# each round and the median over rounds.
summary() { # backend
  python3 - "$WORK" "$1" "$ROUNDS" <<'PY'
import re, statistics, sys
work, backend, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def read(name, r):
    text = open(f"{work}/{backend}-{name}-{r}.txt").read()
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", text).group(1))
    total = int(re.search(r"([0-9]+) requests in", text).group(1))
    p99 = re.search(r"^\s+99%\s+(\S+)", text, re.M).group(1)
    after, before = map(float, open(f"{work}/{backend}-{name}-{r}.cpu").read().split())
    return rps, p99, (after - before) * 1e6 / total
health = [read("healthz", r)[0] for r in range(1, rounds + 1)]
print(f"== {backend}: /healthz " + ", ".join(f"{h:,.0f}" for h in health) + " req/s")
for name in ["id", "card-url", "id-record", "card-url-record"]:
    runs = [read(name, r) for r in range(1, rounds + 1)]
    ratios = [rps / h for (rps, _, _), h in zip(runs, health)]
    cpu = [c for *_, c in runs]
    print(f"== {backend} {name}: ratio " + ", ".join(f"{x:.3f}" for x in ratios)
          + f" (median {statistics.median(ratios):.3f}, min {min(ratios):.3f});"
          + f" p99 " + ", ".join(p for _, p, _ in runs)
          + f"; cardgate CPU " + ", ".join(f"{c:.1f}" for c in cpu)
          + f" us/request (median {statistics.median(cpu):.1f})")
PY
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
