#!/usr/bin/env bash
# Starts N Strata nodes (default 3) on 127.0.0.1 with their own data directories, and prints
# the --nodes string. `deploy/local-cluster.sh stop` stops the nodes running on its data
# directories (those it started, and any restarted there since) and says how many. State lives in $STRATA_CLUSTER_DIR (default ./local-cluster).
#
#   deploy/local-cluster.sh 3          # start 3 nodes
#   strata set k v --nodes "$(cat local-cluster/nodes)"
#   deploy/local-cluster.sh stop
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${STRATA_CLUSTER_DIR:-./local-cluster}"
BIN="${STRATA_BIN:-.build/release/strata}"
BASE_PORT="${STRATA_BASE_PORT:-7401}"

# The strata serve processes whose data directory is one of this cluster's — those it started
# (their PIDs are recorded) and any started again on the same directory since (a rolling
# restart by hand, as docs/OPERATING.md describes, gives a node a new PID).
cluster_pids() {
  local dirs=() d pid cwd data prev arg
  for d in "$DIR"/node*/data; do [ -d "$d" ] && dirs+=("$(cd "$d" && pwd -P)"); done
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ -r "/proc/$pid/cmdline" ] || continue
    tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | grep -qx serve || continue
    cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null) || continue
    data="./strata-data"; prev=""
    while IFS= read -r arg; do
      [ "$prev" = "--data" ] && data="$arg"
      case "$arg" in --data=*) data="${arg#--data=}";; esac
      prev="$arg"
    done < <(tr '\0' '\n' < "/proc/$pid/cmdline")
    case "$data" in /*) ;; *) data="$cwd/$data";; esac
    data=$(cd "$data" 2>/dev/null && pwd -P) || continue
    for d in "${dirs[@]}"; do if [ "$d" = "$data" ]; then echo "$pid"; fi; done
  done
  return 0 # (not the last test's status: under `set -e` a failed one would end `stop` silently)
}

stop() {
  [ -f "$DIR/pids" ] || { echo "no cluster recorded in $DIR"; return 0; }
  local pids
  pids=$(cluster_pids | sort -u)
  if [ -z "$pids" ]; then
    rm -f "$DIR/pids" "$DIR/nodes"
    echo "no node of the cluster in $DIR was running"
    return 0
  fi
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 100); do
    alive=0
    for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  if [ "$alive" = 1 ]; then echo "some nodes did not stop within 10 s: $(for p in $pids; do kill -0 "$p" 2>/dev/null && echo -n "$p "; done)" >&2; return 3; fi
  rm -f "$DIR/pids" "$DIR/nodes"
  echo "stopped $(echo $pids | wc -w) node(s)"
}

if [ "${1:-}" = "stop" ]; then stop; exit $?; fi
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
