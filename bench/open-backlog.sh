#!/bin/bash
# How long a node takes to answer its first request when it holds ~1,000,000 items in SQLite
# and a full durability-log backlog (issue 15: "a node with 1,000,000 items and a full backlog
# still answers within 1 s of starting"). Release build; bounded: two writer phases of at most
# a few seconds each, then RUNS timed starts of a copy of the directory.
#   bench/open-backlog.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
swift build -c release --product strata >/dev/null
swift build -c release --product strata-crash-writer >/dev/null
W=.build/release/strata-crash-writer
S=.build/release/strata
T=$(mktemp -d /tmp/strata-open-backlog.XXXXXX)
trap 'pkill -f "$T" 2>/dev/null || true; rm -rf "$T"' EXIT
D=$T/data
# Phase 1: ~1,000,000 items (4 writers, new keys), then SIGKILL and one clean open/close so all
# of it is in SQLite.
STRATA_FSYNC=no $W $D 4 > $T/w1.out 2>$T/w1.err & WP=$!
for _ in $(seq 600); do [ "$(wc -l < $T/w1.out)" -ge 1000000 ] && break; sleep 0.5; done
kill -9 $WP; wait $WP 2>/dev/null || true
$S serve --port 0 --data $D > $T/s0.out 2>&1 & SP=$!
sleep 5; kill -TERM $SP; wait $SP || true
# Phase 2: the applier stalled, so the writers fill the backlog up to --log-limit (they then
# wait), then SIGKILL: every record is replayed at the next open.
STRATA_FSYNC=no STRATA_APPLY_DELAY=1000 $W $D 4 > $T/w2.out 2>$T/w2.err & WP=$!
sleep 12; kill -9 $WP; wait $WP 2>/dev/null || true
echo "items written: $(wc -l < $T/w1.out) + backlog $(wc -l < $T/w2.out) records"
$S check --data $D | grep -E "^log"
for i in $(seq "$RUNS"); do
  rm -rf $T/copy; cp -a $D $T/copy
  PORT=$((20000 + RANDOM % 20000))
  t0=$(date +%s.%N)
  $S serve --port $PORT --data $T/copy > $T/s.out 2>&1 & SP=$!
  for _ in $(seq 3000); do $S ping --server 127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.01; done
  t1=$(date +%s.%N)
  echo "run $i: first PING answered $(echo "$t1 - $t0" | bc) s after exec"
  kill -TERM $SP; wait $SP || true
done
