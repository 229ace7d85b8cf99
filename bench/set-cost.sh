#!/usr/bin/env bash
#   bench/set-cost.sh [SECONDS, default 20] [ROUNDS, default 3] [STRATA_BINARY…]
# Where a durable SET's CPU goes: workload 2 (90/10, 100 B, 100,000 keys, 50 connections,
# pipeline 16) against a fresh node (--threads 1) per run, then each thread's CPU time
# (/proc/PID/task/*/stat) divided by the log records the node applied to SQLite (its
# log_applied_records, which counts the 100,000 preloaded keys too). The writer, checkpoint
# and applier threads work only for disk writes, so their figure is their cost per durable
# set; the loop's serves every request (its total is printed). With several binaries, the runs
# alternate between them (A B A B …), so a noisy machine moves them alike. Builds the release
# binaries if missing (bench/need.sh); binaries default to .build/release/strata.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/need.sh
need_release
SECS=${1:-20}; ROUNDS=${2:-3}; shift $(( $# >= 2 ? 2 : $# )) || true
BINS=("$@"); [ ${#BINS[@]} -gt 0 ] || BINS=(.build/release/strata)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg); ${SECS} s per run"
for r in $(seq 1 "$ROUNDS"); do
  for BIN in "${BINS[@]}"; do
    W=$(mktemp -d /tmp/set-cost-XXXXXX); P=$(free_port)
    "$BIN" serve --port "$P" --data "$W/d" --threads 1 --log-level warn > "$W/s.log" 2>&1 &
    SP=$!
    for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$P") 2>/dev/null && break; sleep 0.1; done
    LINE=$(.build/release/strata-bench run --target "strata=127.0.0.1:$P" --server-pid "$SP" --value-size 100 --keys 100000 \
      --connections 50 --pipeline 16 --duration "$SECS" --rounds 1 2>&1 | tail -1)
    TICKS=$(for t in /proc/$SP/task/*; do echo "$(cat "$t/comm") $(awk '{print $14+$15}' "$t/stat")"; done)
    N=$("$BIN" stats --server "127.0.0.1:$P" | awk '/log_applied_records/ {print $2}')
    HZ=$(getconf CLK_TCK)
    echo "$TICKS" | awk -v n="$N" -v hz="$HZ" -v line="$LINE" -v bin="$BIN" -v r="$r" '
      {t[$1]+=$2}
      END {split(line,f," ");
        printf "round %d %s: %s ops/s, p99 %s us, %s us CPU/op | per applied record: writer %.1f us, checkpoint %.1f us, applier %.1f us | loop %.1f s in all\n",
          r, bin, f[2], f[5], f[8], t["strata-writer"]*1e6/hz/n, t["strata-ckpt"]*1e6/hz/n, t["strata-applier"]*1e6/hz/n, t["strata-loop"]/hz}'
    kill "$SP"; wait "$SP" 2>/dev/null || true; rm -rf "$W"
  done
done
