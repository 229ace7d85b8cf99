#!/usr/bin/env bash
# A sustained run with the background work inside the figure: one fresh node (--threads 1),
# workload 1's mix (90/10, 100 B, 50 connections, pipeline 1) for SECONDS (default 600), and
# every 30 s a CSV line of the node's total operations, log backlog, log bytes, disk items and
# resident memory, so "flat" can be checked. Stops exactly what it started.
#
#   bench/sustained.sh [SECONDS] > out.csv     (the bench's own summary goes to stderr)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-600}"
make -s release >/dev/null
W=$(mktemp -d /tmp/strata-sustained-XXXXXX)
P=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
.build/release/strata serve --port "$P" --data "$W/d" --threads 1 --log-level warn > "$W/node.out" 2>&1 &
N=$!
cleanup() { kill "$N" 2>/dev/null || true; wait "$N" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$P") 2>/dev/null && break; sleep 0.1; done
.build/release/strata-bench run --target "strata=127.0.0.1:$P" --server-pid "$N" --value-size 100 --keys 100000 \
  --connections 50 --pipeline 1 --duration "$SECS" >&2 &
B=$!
echo "t_s,ops_total,log_backlog_records,log_backlog_bytes,log_bytes,disk_items,rss_kib"
t=0
while kill -0 "$B" 2>/dev/null; do
  sleep 30; t=$((t + 30))
  S=$(.build/release/strata stats --server "127.0.0.1:$P" --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(v for k,v in d.items() if k.startswith("ops_")), d["log_backlog_records"], d["log_backlog_bytes"], d["log_bytes"], d["disk_items"], sep=",")' || echo ",,,,")
  echo "$t,$S,$(awk '/VmRSS/ {print $2}' /proc/$N/status)"
done
wait "$B"
