#!/usr/bin/env bash
# Old and new builds of strata side by side, with Redis (AOF, appendfsync everysec) as the
# anchor, in one strata-bench run (targets alternate every round; ratios are to the first).
#
#   bench/ab.sh OLD_STRATA NEW_STRATA [strata-bench run options…]
#
# Each node is fresh (its own temporary data directory), --threads 1 (the other core is the
# load generator's); REDIS_FSYNC=always|everysec|no picks Redis's policy, NEW_FLAGS adds
# flags to the new node (e.g. NEW_FLAGS="--fsync always"). At the end the new node's log_*
# STATS (the backlog) are printed. Stops exactly what it started. Old builds come from
# `git worktree add /tmp/basewt REV && (cd /tmp/basewt && swift build -c release --product strata)`.
set -euo pipefail
OLD="$1"; NEW="$2"; shift 2
BENCH="$(cd "$(dirname "$0")/.." && pwd)/.build/release/strata-bench"
cd "$(dirname "$0")/.." && source bench/need.sh && need redis-server && need_release && cd - >/dev/null
W=$(mktemp -d /tmp/strata-ab-XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
PO=$(free_port); PN=$(free_port); PR=$(free_port)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT
"$OLD" serve --port "$PO" --data "$W/old" --threads 1 --log-level warn > "$W/old.out" 2>&1 & PIDS+=($!); O=$!
"$NEW" serve --port "$PN" --data "$W/new" --threads 1 --log-level warn ${NEW_FLAGS:-} > "$W/new.out" 2>&1 & PIDS+=($!); N=$!
mkdir -p "$W/aof"
redis-server --bind 127.0.0.1 --port "$PR" --save '' --appendonly yes --appendfsync "${REDIS_FSYNC:-everysec}" --dir "$W/aof" > "$W/redis.log" 2>&1 & PIDS+=($!); R=$!
for p in "$PO" "$PN" "$PR"; do for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null && break; sleep 0.1; done; done
"$BENCH" run --target "strata=127.0.0.1:$PO" --target "strata=127.0.0.1:$PN" --target "redis=127.0.0.1:$PR" \
  --server-pid "$O" --server-pid "$N" --server-pid "$R" "$@"
echo "old = 127.0.0.1:$PO ($OLD), new = 127.0.0.1:$PN ($NEW)"
echo "new node at the end:"
"$NEW" stats --server "127.0.0.1:$PN" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(f"{k}={v}" for k,v in sorted(d.items()) if k.startswith("log_") or k in ("disk_items","disk_commits")))'
