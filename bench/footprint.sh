#!/usr/bin/env bash
# What cardgate costs to run (issue 31): binary and text size, `cardgate --help` peak RSS, cold
# start of `serve` to its first /healthz answer, idle RSS of `serve` on an empty SQLite
# registry, and `cardgate probe` (wall, peak RSS) against the JS and Python SDK agents and the
# fake agent.
#
#   bench/footprint.sh              # release build, 5 runs of each timed figure
#   RUNS=10 PROFILE=release bench/footprint.sh
#
# Idle RSS is read from /proc after 5 s of quiet; cold start is measured by a client that polls
# /healthz every 2 ms from the moment the process is spawned. Figures are medians (max).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
PROFILE=${PROFILE:-release}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --quiet --profile "$PROFILE" --bin cardgate --example fake-agent
BIN=$CARGO_TARGET_DIR/$PROFILE
. bench/lib.sh

echo "== footprint ($PROFILE build; this machine: $(nproc) cores; $(date -u +%F))"
# Everything below runs the stripped binary, as the image ships it (symbols are never loaded,
# so this changes the size on disk only).
stripped=$(mktemp)
strip -o "$stripped" "$BIN/cardgate"
chmod +x "$stripped"
python3 - "$BIN/cardgate" "$stripped" <<'PY'
import os, subprocess, sys
path, stripped = sys.argv[1], sys.argv[2]
text = next(int(l.split()[1]) for l in subprocess.run(["size", "-A", path], capture_output=True, text=True).stdout.splitlines() if l.startswith(".text"))
print(f"binary {os.path.getsize(path)/2**20:.1f} MiB, stripped {os.path.getsize(stripped)/2**20:.1f} MiB, .text {text/2**20:.1f} MiB")
PY

helps=()
for _ in $(seq 1 "$RUNS"); do
  /usr/bin/time -f '%M' -o /tmp/footprint-help "$stripped" --help >/dev/null
  helps+=("$(tail -n1 /tmp/footprint-help)")
done
python3 -c "import statistics,sys; v=[int(x) for x in sys.argv[1:]]; print(f'cardgate --help: peak RSS {statistics.median(v)/1024:.1f} MiB (max {max(v)/1024:.1f})')" "${helps[@]}"

# serve: cold start to /healthz, then idle RSS.
python3 - "$stripped" "$RUNS" <<'PY'
import os, socket, statistics, subprocess, sys, tempfile, time
binary, runs = sys.argv[1], int(sys.argv[2])
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def healthy(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.05) as c:
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return c.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False
starts, idles = [], []
for _ in range(runs):
    port = free_port()
    d = tempfile.mkdtemp()
    env = dict(os.environ, DATABASE_URL=f"sqlite://{d}/cardgate.db", CARDGATE_LISTEN=f"127.0.0.1:{port}",
               RUST_LOG="warn")
    t0 = time.perf_counter()
    p = subprocess.Popen([binary, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not healthy(port):
        if p.poll() is not None: sys.exit("serve exited")
        time.sleep(0.002)
    starts.append((time.perf_counter() - t0) * 1000)
    time.sleep(5)
    rss = next(int(l.split()[1]) for l in open(f"/proc/{p.pid}/status") if l.startswith("VmRSS"))
    idles.append(rss / 1024)
    p.terminate(); p.wait()
print(f"serve cold start to first /healthz: {statistics.median(starts):.0f} ms (max {max(starts):.0f}); "
      f"note: the first start of a fresh database also migrates it")
print(f"serve idle RSS, empty SQLite: {statistics.median(idles):.1f} MiB (max {max(idles):.1f})")
PY

# cardgate probe: wall and peak RSS.
measure() {
  local label=$1 origin=$2; shift 2
  local walls=() rss=() code=0
  for _ in $(seq 1 "$RUNS"); do
    /usr/bin/time -f '%e %M' -o /tmp/footprint-probe "$stripped" probe "$origin" --json \
      --allow-networks 127.0.0.0/8 "$@" >/dev/null 2>&1 || code=$?
    read -r secs kib < <(tail -n1 /tmp/footprint-probe)
    walls+=("$(python3 -c "print(round($secs*1000))")"); rss+=("$kib")
  done
  python3 - "$label" "$code" "${walls[*]}" "${rss[*]}" <<'PY'
import statistics, sys
label, code, walls, rss = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split()], [int(x) for x in sys.argv[4].split()]
print(f"probe, {label}: wall {statistics.median(walls):.0f} ms (max {max(walls)}), peak RSS {statistics.median(rss)/1024:.1f} MiB (max {max(rss)/1024:.1f}), exit {code}")
PY
}
if [ -d tests/agents/js/node_modules/@a2a-js/sdk ]; then
  out=$(mktemp); node tests/agents/js/agent.mjs --port 0 >"$out" 2>/dev/null & pids+=($!)
  for _ in $(seq 1 300); do ORIGIN=$(sed -n 's/^READY //p' "$out" | head -n1); [ -n "$ORIGIN" ] && break; sleep 0.1; done
  measure "JS SDK agent, 1.0 + 0.3" "$ORIGIN"
fi
PY_SDK=${CARDGATE_TEST_PYTHON:-/var/tmp/cardgate-pyenv/bin/python}
if [ -x "$PY_SDK" ]; then
  out=$(mktemp); "$PY_SDK" tests/agents/python/agent.py --port 0 >"$out" 2>/dev/null & pids+=($!)
  for _ in $(seq 1 300); do ORIGIN=$(sed -n 's/^READY //p' "$out" | head -n1); [ -n "$ORIGIN" ] && break; sleep 0.1; done
  measure "Python SDK agent, 1.0 + 0.3" "$ORIGIN"
fi
port=$(free_port)
"$BIN/examples/fake-agent" --listen "127.0.0.1:$port" >/dev/null 2>&1 & pids+=($!)
wait_ready "http://127.0.0.1:$port/.well-known/agent-card.json"
measure "fake agent, conformant 1.0" "http://127.0.0.1:$port"
