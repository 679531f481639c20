# Shared by the bench scripts (sourced, not run): background processes killed on exit, free
# loopback ports, readiness waits, and a callee registered and probed to lifecycle-trusted.

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Waits up to 60 s for a URL to answer 2xx.
wait_ready() { for _ in $(seq 1 600); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "not ready: $1" >&2; return 1; }

# register_promoted <cardgate url> <admin token> <card url>: registers the card (which queues
# its probe), waits until its first subject is lifecycle-trusted, and prints the callee id.
register_promoted() {
  local callee gate
  callee=$(curl -fsS -H "Authorization: Bearer $2" -H 'content-type: application/json' \
    -d "{\"card_url\":\"$3\"}" "$1/v1/callees" | python3 -c 'import sys,json; print(json.load(sys.stdin)["id"])')
  for _ in $(seq 1 100); do
    gate=$(curl -fsS -H "Authorization: Bearer $2" "$1/v1/callees/$callee" | python3 -c 'import sys,json; print(json.load(sys.stdin)["subjects"][0]["gate_state"])')
    [ "$gate" = lifecycle-trusted ] && break; sleep 0.2
  done
  echo "subject: $gate" >&2
  echo "$callee"
}
