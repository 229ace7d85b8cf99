#!/usr/bin/env bash
# Issue 17's performance figures, in one run on this machine:
#
#   bench/cluster.sh [SECONDS] [ROUNDS] [KEYS]        (defaults 30, 3, 100000)
#
# 1. Workload 8: three nodes started with --cluster (R = 2, anti-entropy every 2 s), three
#    nodes without --cluster, and one node, each through the cluster client (strata-bench run
#    --target cluster=…; workload 1's mix: 90 % GET / 10 % SET, 100 B, KEYS keys, 50
#    connections, pipeline 1), targets alternating every round, SECONDS per round (≥ 30, so
#    the background rounds are inside the figure). Ratios are to the first target.
# 2. Anti-entropy when nothing differs: the six cluster nodes, loaded and then left idle for
#    SECONDS; the CPU seconds each spent (from /proc/PID/stat), as % of one core, with and
#    without --cluster, and the sync STATS of a --cluster node (rounds, µs per round, buckets
#    that differed).
#
# Every server binds 127.0.0.1 on a free port with --threads 1; the script stops exactly the
# processes it started. Needs a release build (make release).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-30}"; ROUNDS="${2:-3}"; KEYS="${3:-100000}"
BIN=.build/release/strata; BENCH=.build/release/strata-bench
[ -x "$BIN" ] && [ -x "$BENCH" ] || { echo "run make release first" >&2; exit 2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
WORK=$(mktemp -d /tmp/strata-cluster-bench-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
wait_port() { for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

AE=(); AEN=""; PL=(); PLN=""; APID=(); PPID_=()
for i in 0 1 2; do p=$(free_port); AE+=("$p"); AEN="$AEN${AEN:+,}127.0.0.1:$p"; done
for i in 0 1 2; do p=$(free_port); PL+=("$p"); PLN="$PLN${PLN:+,}127.0.0.1:$p"; done
for i in 0 1 2; do
  "$BIN" serve --port "${AE[$i]}" --data "$WORK/ae$i" --threads 1 --log-level warn --cluster "$AEN" --replicas 2 > /dev/null 2>&1 &
  PIDS+=($!); APID+=($!)
  "$BIN" serve --port "${PL[$i]}" --data "$WORK/plain$i" --threads 1 --log-level warn > /dev/null 2>&1 &
  PIDS+=($!); PPID_+=($!)
done
P1=$(free_port)
"$BIN" serve --port "$P1" --data "$WORK/one" --threads 1 --log-level warn > /dev/null 2>&1 & PIDS+=($!)
for p in "${AE[@]}" "${PL[@]}" "$P1"; do wait_port "$p"; done

echo "== workload 8: cluster with anti-entropy, cluster without, one node ($SECS s × $ROUNDS rounds)"
"$BENCH" run --target "cluster=$AEN" --target "cluster=$PLN" --target "cluster=127.0.0.1:$P1" --replicas 2 \
  --value-size 100 --keys "$KEYS" --connections 50 --duration "$SECS" --rounds "$ROUNDS"

echo "== anti-entropy with nothing differing: $SECS s idle after the load"
sleep 5 # the last writes settle (a synced round leaves out the last 2 s)
declare -A T0
for p in "${APID[@]}" "${PPID_[@]}"; do T0[$p]=$(cpu_ticks "$p"); done
HZ=$(getconf CLK_TCK)
sleep "$SECS"
for p in "${APID[@]}"; do
  t=$(( $(cpu_ticks "$p") - ${T0[$p]} )); echo "with --cluster    pid $p: $(python3 -c "print(f'{$t/$HZ:.2f} s CPU = {100*$t/$HZ/$SECS:.2f} % of a core')")"
done
for p in "${PPID_[@]}"; do
  t=$(( $(cpu_ticks "$p") - ${T0[$p]} )); echo "without --cluster pid $p: $(python3 -c "print(f'{$t/$HZ:.2f} s CPU = {100*$t/$HZ/$SECS:.2f} % of a core')")"
done
"$BIN" stats --server "127.0.0.1:${AE[0]}" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); r=max(1,d.get("sync_rounds",0)); print("node 0:", " ".join(f"{k}={d[k]}" for k in sorted(d) if k.startswith(("sync_","cluster_","disk_items","peers_","unverified","handoff_"))), "us_per_round=%d" % (d.get("sync_us",0)//r))'
