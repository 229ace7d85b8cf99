#!/usr/bin/env bash
# Starts N Strata nodes (default 3) on 127.0.0.1 with their own data directories, and prints
# the --nodes string. `deploy/local-cluster.sh stop` stops exactly the nodes it started (by the
# PIDs it recorded). State lives in $STRATA_CLUSTER_DIR (default ./local-cluster).
#
#   deploy/local-cluster.sh 3          # start 3 nodes
#   strata set k v --nodes "$(cat local-cluster/nodes)"
#   deploy/local-cluster.sh stop
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${STRATA_CLUSTER_DIR:-./local-cluster}"
BIN="${STRATA_BIN:-.build/release/strata}"
BASE_PORT="${STRATA_BASE_PORT:-7401}"

stop() {
  [ -f "$DIR/pids" ] || { echo "no cluster recorded in $DIR"; return 0; }
  while read -r pid; do
    # Only a process that is still our strata node (not a reused PID).
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q "strata" "/proc/$pid/cmdline" 2>/dev/null; then
      kill -TERM "$pid"
    fi
  done < "$DIR/pids"
  for _ in $(seq 1 100); do
    alive=0
    while read -r pid; do kill -0 "$pid" 2>/dev/null && alive=1; done < "$DIR/pids"
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  rm -f "$DIR/pids" "$DIR/nodes"
  echo "stopped"
}

if [ "${1:-}" = "stop" ]; then stop; exit 0; fi
N="${1:-3}"
case "$N" in ''|*[!0-9]*) echo "usage: $0 [N] | stop" >&2; exit 2;; esac
[ -x "$BIN" ] || { echo "$BIN is missing: run make release first" >&2; exit 2; }
if [ -f "$DIR/pids" ]; then echo "a cluster is already recorded in $DIR; run '$0 stop' first" >&2; exit 2; fi
mkdir -p "$DIR"
: > "$DIR/pids"
nodes=""
for i in $(seq 0 $((N - 1))); do nodes="${nodes:+$nodes,}127.0.0.1:$((BASE_PORT + i))"; done
# Every node knows the whole cluster (--cluster), so the nodes repair each other's keys.
for i in $(seq 0 $((N - 1))); do
  port=$((BASE_PORT + i))
  mkdir -p "$DIR/node$i"
  "$BIN" serve --host 127.0.0.1 --port "$port" --data "$DIR/node$i/data" --threads 1 --cluster "$nodes" \
      > "$DIR/node$i/out.log" 2> "$DIR/node$i/err.log" &
  echo $! >> "$DIR/pids"
done
# Wait until every node prints where it listens.
for i in $(seq 0 $((N - 1))); do
  for _ in $(seq 1 100); do grep -q "listening" "$DIR/node$i/out.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "listening" "$DIR/node$i/out.log" || { echo "node $i did not start:" >&2; cat "$DIR/node$i/err.log" >&2; stop; exit 3; }
done
echo "$nodes" > "$DIR/nodes"
echo "$nodes"
