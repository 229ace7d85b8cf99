#!/usr/bin/env bash
#   bench/w2ab.sh OLD_STRATA NEW_STRATA [SECONDS, default 30] [ROUNDS, default 3]
# Workload 2 with two builds and Redis in one strata-bench process (targets alternate every
# round, so a noisy machine moves them alike): 90/10 and GET-only, 100 B, 100,000 keys,
# 50 connections, pipeline 16; each Strata node fresh with --threads 1, Redis without
# persistence. Prints each node's log backlog after the 90/10 run. Installs redis-server and
# builds the release binaries if missing (bench/need.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/need.sh
need redis-server
need_release
OLD="$1"; NEW="$2"; SECS=${3:-30}; R=${4:-3}
W=$(mktemp -d /tmp/w2ab-XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
B=$(free_port); N=$(free_port); RP=$(free_port)
"$OLD" serve --port "$B" --data "$W/b" --threads 1 --log-level warn > "$W/b.log" 2>&1 & BPID=$!
"$NEW" serve --port "$N" --data "$W/n" --threads 1 --log-level warn > "$W/n.log" 2>&1 & NPID=$!
redis-server --bind 127.0.0.1 --port "$RP" --save '' --appendonly no --dir "$W" > "$W/r.log" 2>&1 & RPID=$!
trap 'kill $BPID $NPID $RPID 2>/dev/null; wait $BPID $NPID $RPID 2>/dev/null; rm -rf "$W"' EXIT
for p in "$B" "$N" "$RP"; do for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null && break; sleep 0.1; done; done
echo "old=$B ($OLD) new=$N ($NEW) redis=$RP $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
T=(--target "strata=127.0.0.1:$B" --target "strata=127.0.0.1:$N" --target "redis=127.0.0.1:$RP" --server-pid "$BPID" --server-pid "$NPID" --server-pid "$RPID")
echo "== 90/10 p16 ($SECS s x $R)"
.build/release/strata-bench run "${T[@]}" --value-size 100 --keys 100000 --connections 50 --pipeline 16 --duration "$SECS" --rounds "$R" 2>&1 | tail -6
for p in "$B" "$N"; do echo "backlog $p: $("$NEW" stats --server "127.0.0.1:$p" | grep -E 'log_backlog_(bytes|records)' | tr -s ' ' | tr '\n' ' ')"; done
echo "== GET-only p16 (10 s x $R)"
.build/release/strata-bench run "${T[@]}" --get-ratio 1 --value-size 100 --keys 100000 --connections 50 --pipeline 16 --duration 10 --rounds "$R" 2>&1 | tail -6
