#!/usr/bin/env bash
#   bench/cluster-set-cost.sh [SECONDS, default 30] [ROUNDS, default 2] [STRATA_BINARY…]
# What a durable SET costs on a cluster node's disk writer thread — where the maintained
# anti-entropy digests (SyncDigests, its SQLite triggers) add their work: two --cluster nodes
# (R = 2, --threads 1), SETs only (100 B, 200,000 keys, 8 connections) through the cluster
# client for SECONDS, then node A's strata-writer thread CPU per record it applied
# (log_applied_records), its whole-process CPU per record, and the client's throughput. Runs
# alternate between binaries (A B A B …). Binaries default to .build/release/strata.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/need.sh
need_release
SECS=${1:-30}; ROUNDS=${2:-2}; shift $(( $# >= 2 ? 2 : $# )) || true
BINS=("$@"); [ ${#BINS[@]} -gt 0 ] || BINS=(.build/release/strata)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
HZ=$(getconf CLK_TCK)
echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg); ${SECS} s per run"
for r in $(seq 1 "$ROUNDS"); do
  for BIN in "${BINS[@]}"; do
    W=$(mktemp -d /tmp/cl-set-XXXXXX); PA=$(free_port); PB=$(free_port); CL=127.0.0.1:$PA,127.0.0.1:$PB
    "$BIN" serve --port "$PA" --data "$W/a" --cluster "$CL" --threads 1 --log-level warn > "$W/a.log" 2>&1 & A=$!
    "$BIN" serve --port "$PB" --data "$W/b" --cluster "$CL" --threads 1 --log-level warn > "$W/b.log" 2>&1 & B=$!
    for p in $PA $PB; do for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null && break; sleep 0.1; done; done
    LINE=$(.build/release/strata-bench run --target "cluster=$CL" --replicas 2 --get-ratio 0 --value-size 100 --keys 200000 \
      --connections 8 --duration "$SECS" --no-preload 2>&1 | tail -1)
    WR=$(for t in /proc/$A/task/*; do if [ "$(cat "$t/comm")" = strata-writer ]; then awk '{print $14+$15}' "$t/stat"; fi; done | head -1)
    ALL=$(awk '{print $14+$15}' /proc/$A/stat)
    N=$("$BIN" stats --server "127.0.0.1:$PA" | awk '/log_applied_records/ {print $2}' || true)
    python3 - "$BIN" "$r" "$WR" "$ALL" "$N" "$HZ" "$LINE" <<'PY'
import sys
b, r, wr, al, n, hz, line = sys.argv[1:]
n = max(int(n), 1); us = 1e6 / int(hz)
print(f"round {r} {b}: writer {int(wr)*us/n:.1f} µs/record, node A {int(al)*us/n:.1f} µs/record, records {n}; client: {line.strip()}")
PY
    kill $A $B; wait $A $B 2>/dev/null || true; rm -rf "$W"
  done
done
