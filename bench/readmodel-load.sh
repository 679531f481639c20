#!/usr/bin/env bash
# How long cardgate takes to build its in-memory read model, and what it costs in memory, with
# N subjects on Postgres (issue 12: 100,000 subjects in under 5 s).
#
#   bench/readmodel-load.sh            # N=100000
#   N=20000 bench/readmodel-load.sh
#   PROFILE=dist N=10000 bench/readmodel-load.sh   # the shipped build
#   KEEP_DB=1 bench/readmodel-load.sh   # keep the database, to profile a start against it
#   TRUST=1 N=1000000 PROFILE=dist bench/readmodel-load.sh   # also GET /v1/trust under load
#                                       # (wrk, by callee id and by card URL, beside /healthz)
#
# One real callee is registered against a conformant fake agent and probed to lifecycle-trusted;
# its rows (callee, subject, newest snapshot with its assessment, finished probe run with its
# judgement, transcript and track-record contribution) are then cloned N-1 times in SQL, so
# every subject is as large as a real one. cardgate is started on the database twice, with 1 subject and with N; each start
# logs how long the load took, and the resident memory after it is read from /proc.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100000}
PG_ADMIN=${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
TOKEN=bench-admin-token-0123456789abcdefghijklmnop
WORK=$(mktemp -d)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
PROFILE=${PROFILE:-release}   # PROFILE=dist measures the binary the image ships
# NO_BUILD=1: measure binaries already in $CARGO_TARGET_DIR/$PROFILE (an earlier build kept aside).
[ -n "${NO_BUILD:-}" ] || cargo build --quiet --profile "$PROFILE" --bin cardgate --example fake-agent
BIN=$CARGO_TARGET_DIR/$PROFILE

. bench/lib.sh

PG_DB=cardgate_rmbench_$$
psql "$PG_ADMIN" -qc "create database $PG_DB" >/dev/null
PG_URL="${PG_ADMIN%/*}/$PG_DB"
AGENT_PORT=$(free_port)
"$BIN/examples/fake-agent" --listen "127.0.0.1:$AGENT_PORT" > "$WORK/agent.log" 2>&1 &
pids+=($!)
wait_ready "http://127.0.0.1:$AGENT_PORT/.well-known/agent-card.json"

start() { # log → sets PORT, SERVER
  PORT=$(free_port)
  DATABASE_URL=$PG_URL CARDGATE_LISTEN="127.0.0.1:$PORT" CARDGATE_ADMIN_TOKEN=$TOKEN \
  CARDGATE_ALLOW_NETWORKS=127.0.0.0/8 CARDGATE_PUBLIC_URL="http://127.0.0.1:$PORT/" \
  CARDGATE_REFRESH_SCHEDULE=off RUST_LOG=warn,cardgate::app=info,cardgate::service::readmodel=info \
  CARDGATE_RATE_LIMIT_PER_SEC=10000000 CARDGATE_RATE_LIMIT_BURST=10000000 \
    "$BIN/cardgate" serve > "$WORK/$1" 2>&1 &
  SERVER=$!
  pids+=($SERVER)
  # A million subjects take longer to load than wait_ready's minute.
  for _ in $(seq 1 3000); do curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "not ready after 300 s" >&2; return 1
}
stop() { kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; }
loaded() { grep -o '"read model loaded".*\|read model loaded.*' "$WORK/$1" | head -1; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$SERVER/status"; }

start first.log
url="http://127.0.0.1:$PORT"
callee=$(register_promoted "$url" "$TOKEN" "http://127.0.0.1:$AGENT_PORT")
stop

start one.log
one_rss=$(rss_kib)
echo "1 subject: $(loaded one.log); RSS $one_rss KiB"
stop

echo "cloning the template to $N subjects..."
psql "$PG_URL" -v ON_ERROR_STOP=1 -q <<SQL
-- UUID v7 ids, as cardgate makes them: time-ordered, so rows sit in the heap in id order as
-- they would after real registrations (random v4 ids would scatter every page of the load).
create function bench_v7(n bigint, salt text) returns uuid language sql as \$\$
  select (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || substr(r, 1, 3) || '-8'
    || substr(r, 4, 3) || '-' || substr(r, 7, 12))::uuid
  from (select lpad(to_hex(1800000000000 + n), 12, '0') as h, md5(salt || n) as r) as parts
\$\$;
create table bench_ids as select bench_v7(n, 'callee') as id, n from generate_series(2, $N) as n;
insert into callees (id, card_url, name, created_at, fetch_failures, next_fetch_at, refresh_generation)
  select i.id, c.card_url || '/clone/' || i.n, c.name, c.created_at, 0, now() + interval '1 year', 0
  from bench_ids i cross join callees c where c.id = '$callee';
insert into subjects (callee_id, protocol_version, gate_state, state, last_seq, last_hash,
    last_change_seq, last_change_at, created_at)
  select i.id, s.protocol_version, s.gate_state, s.state, s.last_seq, s.last_hash,
    s.last_change_seq, s.last_change_at, s.created_at
  from bench_ids i cross join subjects s where s.callee_id = '$callee';
insert into card_snapshots (id, callee_id, fetched_at, url, sha256, raw, etag, last_modified,
    trusted, assessment)
  select bench_v7(i.n, 'snapshot'), i.id, s.fetched_at, s.url, s.sha256, s.raw, s.etag, s.last_modified,
    s.trusted, s.assessment
  from bench_ids i cross join card_snapshots s where s.callee_id = '$callee';
insert into probe_runs (id, callee_id, protocol_version, status, reason, requested_by, created_at,
    started_at, finished_at, interface_url, wire, push_token, passed, judgement, observations,
    transcript, error, ledger_seqs, start_seq, facts, record)
  select bench_v7(i.n, 'run'), i.id, r.protocol_version, r.status, r.reason, r.requested_by,
    r.created_at, r.started_at, r.finished_at, r.interface_url, r.wire, md5(random()::text || i.n),
    r.passed, r.judgement, r.observations, r.transcript, r.error, r.ledger_seqs, r.start_seq,
    r.facts, r.record
  from bench_ids i cross join probe_runs r where r.callee_id = '$callee' and r.status = 'finished';
drop table bench_ids;
drop function bench_v7;
analyze;
SQL
psql "$PG_URL" -Atc "select 'rows: ' || (select count(*) from subjects) || ' subjects, ' || (select count(*) from card_snapshots) || ' snapshots, ' || (select count(*) from probe_runs) || ' runs; assessment ' || (select avg(length(assessment))::int from card_snapshots) || ' B, judgement ' || (select avg(length(judgement))::int from probe_runs) || ' B, facts ' || (select avg(length(facts))::int from probe_runs) || ' B'"

start many.log
many_rss=$(rss_kib)
echo "$N subjects: $(loaded many.log); RSS $many_rss KiB"
echo "== memory per subject: $(( (many_rss - one_rss) * 1024 / (N - 1) )) bytes (RSS difference / $((N - 1)))"
# A Prometheus scrape counts the subjects of each track-record class, a walk of the whole model.
for _ in 1 2 3; do
  curl -fsS -o /dev/null -w '/metrics scrape: %{time_total} s\n' -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/metrics"
done
curl -fsS -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/metrics" | grep '^cardgate_track_record_subjects'
if [ -n "${TRUST:-}" ]; then
  # A start checks the stored evidence against the rulebook in force, in the background (some
  # 50 s at a million subjects, mostly the database's): measure the steady state after it.
  for _ in $(seq 1 1200); do grep -q "stored evidence checked" "$WORK/many.log" && break; sleep 0.5; done
  grep -o 'stored evidence checked.*' "$WORK/many.log" | sed 's/rulebook="[0-9a-f]*" //' || true
  # GET /v1/trust with N subjects loaded, by id and by card URL, beside /healthz in the same
  # run (issue 30: a ratio of at least 0.8 for both, p99 at most 3 ms, at 32 connections).
  url="http://127.0.0.1:$PORT"
  reader=$(curl -fsS -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' \
    -d '{"name":"bench","role":"reader"}' "$url/v1/keys" | python3 -c 'import sys,json; print(json.load(sys.stdin)["key"])')
  card_url=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "http://127.0.0.1:$AGENT_PORT")
  query="caller_version=1.0&requires=streaming,pushNotifications"
  load() { # name url [header]
    wrk -t2 -c"${CONNECTIONS:-32}" -d"${DURATION:-10s}" --latency ${3:+-H "$3"} "$2" > "$WORK/$1.txt"
    echo "$1: $(awk '/Requests\/sec/ {print $2}' "$WORK/$1.txt") req/s, p99 $(awk '$1 == "99%" {print $2}' "$WORK/$1.txt")$(grep -o 'Non-2xx.*' "$WORK/$1.txt" | sed 's/^/, /')"
  }
  load by-id "$url/v1/trust?callee_id=$callee&$query" "Authorization: Bearer $reader"
  load by-card-url "$url/v1/trust?card_url=$card_url&$query" "Authorization: Bearer $reader"
  load healthz "$url/healthz"
  rps() { awk '/Requests\/sec/ {print $2}' "$WORK/$1.txt"; }
  echo "== ratio to /healthz: by id $(echo "scale=3; $(rps by-id) / $(rps healthz)" | bc), by card URL $(echo "scale=3; $(rps by-card-url) / $(rps healthz)" | bc)"
fi
stop

cleanup
if [ -n "${KEEP_DB:-}" ]; then
  echo "kept the database: $PG_URL"
else
  psql "$PG_ADMIN" -qc "drop database if exists $PG_DB with (force)" >/dev/null || true
fi
