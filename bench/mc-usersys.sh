#!/usr/bin/env bash
#   bench/mc-usersys.sh [STRATA_BINARY, default .build/release/strata] [ROUNDS, default 3] [SECONDS, default 4]
# Where the CPU of a pipeline-1 memcached GET goes: memcached 1.6 (-t 1) and Strata's
# memory-only memcached listener (--threads 1) under the same strata-bench load (90/10, 100 B,
# 100,000 keys, 50 connections, pipeline 1), one target at a time, rounds alternating; for each
# round the server's user and system CPU from /proc/PID/stat (clock ticks, 10 ms), and the
# throughput. Installs memcached and builds the release binaries if missing (bench/need.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/need.sh
need memcached
need_release
S="${1:-.build/release/strata}"; R=${2:-3}; SECS=${3:-4}
W=$(mktemp -d /tmp/mc-usersys-XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
MP=$(free_port); SP=$(free_port); MCP=$(free_port)
USER_FLAG=""; [ "$(id -u)" = 0 ] && USER_FLAG="-u nobody"
memcached -l 127.0.0.1 -p "$MP" -t 1 -m 2048 -U 0 $USER_FLAG & M=$!
"$S" serve --port "$SP" --data "$W/d" --threads 1 --memcached-port "$MCP" --memcached-memory-only --log-level warn > "$W/s.log" 2>&1 & N=$!
trap 'kill $M $N 2>/dev/null; wait $M $N 2>/dev/null; rm -rf "$W"' EXIT
for p in "$MP" "$MCP"; do for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null && break; sleep 0.1; done; done
ticks() { awk '{print $14, $15}' /proc/"$1"/stat; }
echo "memcached=$MP strata=$MCP ($S) $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round target user_ticks sys_ticks ops/s cpu_us/op"
for r in $(seq 1 "$R"); do
  for t in memcached strata; do
    pid=$([ $t = memcached ] && echo $M || echo $N); port=$([ $t = memcached ] && echo $MP || echo $MCP)
    read -r u0 s0 < <(ticks "$pid")
    line=$(.build/release/strata-bench run --target "memcached=127.0.0.1:$port" --server-pid "$pid" --value-size 100 --keys 100000 \
           --connections 50 --pipeline 1 --duration "$SECS" --rounds 1 2>&1 | grep '^memcached@' | tail -1)
    read -r u1 s1 < <(ticks "$pid")
    echo "$r $t $((u1 - u0)) $((s1 - s0)) $(echo "$line" | awk '{print $2, $8}')"
  done
done
