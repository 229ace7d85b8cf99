#!/usr/bin/env bash
#   bench/mc-ab.sh OLD_STRATA NEW_STRATA [PIPELINE, default 1] [SECONDS, default 4] [ROUNDS, default 3] [strata serve flags…]
# memcached 1.6 (-t 1) and two Strata builds speaking memcached's text protocol
# (--memcached-port, --threads 1; add --memcached-memory-only for the memory-only listener),
# 90/10, 100 B, 100,000 keys, 50 connections, in one strata-bench process (targets alternate
# every round). Installs memcached and builds the release binaries if missing (bench/need.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/need.sh
need memcached
need_release
OLD="$1"; NEW="$2"; PL=${3:-1}; SECS=${4:-4}; R=${5:-3}; shift $(( $# >= 5 ? 5 : $# ))
W=$(mktemp -d /tmp/mc-ab-XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
MC=$(free_port); B=$(free_port); N=$(free_port)
USER_FLAG=""; [ "$(id -u)" = 0 ] && USER_FLAG="-u nobody"
memcached -l 127.0.0.1 -p "$MC" -t 1 -m 2048 -U 0 $USER_FLAG & MPID=$!
"$OLD" serve --port 0 --data "$W/b" --threads 1 --memcached-port "$B" "$@" --log-level warn > "$W/b.log" 2>&1 & BPID=$!
"$NEW" serve --port 0 --data "$W/n" --threads 1 --memcached-port "$N" "$@" --log-level warn > "$W/n.log" 2>&1 & NPID=$!
trap 'kill $MPID $BPID $NPID 2>/dev/null; wait $MPID $BPID $NPID 2>/dev/null; rm -rf "$W"' EXIT
for p in "$MC" "$B" "$N"; do for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null && break; sleep 0.1; done; done
echo "memcached=$MC old=$B ($OLD) new=$N ($NEW) pipeline $PL $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
.build/release/strata-bench run --target "memcached=127.0.0.1:$MC" --target "memcached=127.0.0.1:$B" --target "memcached=127.0.0.1:$N" \
  --server-pid "$MPID" --server-pid "$BPID" --server-pid "$NPID" --value-size 100 --keys 100000 --connections 50 \
  --pipeline "$PL" --duration "$SECS" --rounds "$R" 2>&1 | tail -6
