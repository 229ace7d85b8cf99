#!/usr/bin/env bash
#   bench/w2.sh [SECONDS, default 30] [ROUNDS, default 3]   (installs redis-server and builds the release binaries if missing: bench/need.sh)
# Workload 2 side by side: Strata (release, --threads 1) and Redis (no persistence), 90/10 and
# GET-only at pipeline 16, 100 B, 100,000 keys, 50 connections; targets alternate.
# REDIS_AOF=1 adds a third target: Redis with `appendonly yes`, `appendfsync everysec` (durable
# sets as Strata's default `--fsync everysec` makes them).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/need.sh
need redis-server
need_release
SECS=${1:-30}; ROUNDS=${2:-3}
W=$(mktemp -d /tmp/w2-XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
SP=$(free_port); RP=$(free_port)
.build/release/strata serve --host 127.0.0.1 --port "$SP" --data "$W/s" --threads 1 --log-level warn > "$W/s.log" 2>&1 &
SPID=$!
redis-server --bind 127.0.0.1 --port "$RP" --save '' --appendonly no --dir "$W" > "$W/r.log" 2>&1 &
RPID=$!
T=(--target "strata=127.0.0.1:$SP" --target "redis=127.0.0.1:$RP" --server-pid "$SPID" --server-pid "$RPID")
APID=""
if [ -n "${REDIS_AOF:-}" ]; then
  AP=$(free_port); mkdir -p "$W/aof"
  redis-server --bind 127.0.0.1 --port "$AP" --save '' --appendonly yes --appendfsync everysec --dir "$W/aof" > "$W/a.log" 2>&1 &
  APID=$!
  T+=(--target "redis=127.0.0.1:$AP" --server-pid "$APID")
fi
trap 'kill $SPID $RPID $APID 2>/dev/null; wait $SPID $RPID $APID 2>/dev/null; rm -rf "$W"' EXIT
sleep 1
echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg); strata=$SP redis=$RP ${APID:+redis-aof=$AP}"
echo "== 90/10 p16 ($SECS s x $ROUNDS)"
.build/release/strata-bench run "${T[@]}" --value-size 100 --keys 100000 --connections 50 --pipeline 16 --duration "$SECS" --rounds "$ROUNDS" 2>&1
echo "strata log after the 90/10 run: $(.build/release/strata stats --server 127.0.0.1:$SP 2>/dev/null | grep -E '^log_backlog_records|^log_backpressure_waits' | tr -s ' \n' ' ')"
echo "== GET-only p16 (10 s x $ROUNDS)"
.build/release/strata-bench run "${T[@]}" --get-ratio 1 --value-size 100 --keys 100000 --connections 50 --pipeline 16 --duration 10 --rounds "$ROUNDS" 2>&1
