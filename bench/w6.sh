#!/usr/bin/env bash
#   bench/w6.sh [SECONDS, default 8] [ROUNDS, default 3] [STRATA_BINARY…]
# Workload 6 alone (bench/anchors.sh's section 6): 10 KiB gets from the disk tier only, at
# 100 % hits on both sides — memcached 1.6 with extstore (128 MiB of memory for 300 MB of
# values) and one or more Strata builds (defaults, --threads 1, gets with --tiers disk), in one
# strata-bench process, targets alternating every round. The preload is written at 5,000 sets/s
# (--preload-rate), which extstore's flusher keeps up with; unthrottled, memcached drops 25–60 %
# of the items and answers cheap misses. Installs memcached and builds the release binaries if
# missing (bench/need.sh); binaries default to .build/release/strata. STRATA_FLAGS adds
# flags to every `strata serve` (e.g. STRATA_FLAGS="--disk-workers 4"). VIA_MEMCACHED=1 reads
# each Strata build through its memcached listener instead (memcached's text protocol on both
# sides; `--memory-limit 16MiB` so that most gets miss memory and read the disk tier, as the
# listener has no tier mask).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/need.sh
need memcached
need_release
SECS=${1:-8}; ROUNDS=${2:-3}; shift $(( $# >= 2 ? 2 : $# )) || true
BINS=("$@"); [ ${#BINS[@]} -gt 0 ] || BINS=(.build/release/strata)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
W=$(mktemp -d /tmp/strata-w6-XXXXXX)
chmod 777 "$W" # memcached drops to nobody when started as root; extstore's file lives here
USER_FLAG=""; [ "$(id -u)" = 0 ] && USER_FLAG="-u nobody"
MC=$(free_port)
memcached -l 127.0.0.1 -p "$MC" -t 1 -m 128 -U 0 $USER_FLAG \
  -o "ext_path=$W/extstore:2G,ext_wbuf_size=8,ext_threads=2,ext_max_sleep=1000,slab_automove_freeratio=0.10" > "$W/memcached.log" 2>&1 &
PIDS=($!)
TARGETS=(--target "memcached=127.0.0.1:$MC" --server-pid "$!")
trap 'kill "${PIDS[@]}" 2>/dev/null; wait "${PIDS[@]}" 2>/dev/null; rm -rf "$W"' EXIT
PORTS=("$MC")
for B in "${BINS[@]}"; do
  P=$(free_port)
  if [ "${VIA_MEMCACHED:-0}" = 1 ]; then
    M=$(free_port)
    "$B" serve --port "$P" --memcached-port "$M" --memory-limit 16MiB --data "$W/d$P" --threads 1 --log-level warn ${STRATA_FLAGS:-} > "$W/strata-$P.log" 2>&1 &
    PIDS+=($!); PORTS+=("$P" "$M")
    TARGETS+=(--target "memcached=127.0.0.1:$M" --server-pid "$!")
  else
    "$B" serve --port "$P" --data "$W/d$P" --threads 1 --log-level warn ${STRATA_FLAGS:-} > "$W/strata-$P.log" 2>&1 &
    PIDS+=($!); PORTS+=("$P")
    TARGETS+=(--target "strata=127.0.0.1:$P" --server-pid "$!")
  fi
done
for p in "${PORTS[@]}"; do for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null && break; sleep 0.1; done; done
echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg); strata: ${BINS[*]}"
.build/release/strata-bench run "${TARGETS[@]}" --get-ratio 1 --tiers disk --value-size 10KiB --keys 30000 \
  --connections 50 --pipeline 1 --duration "$SECS" --rounds "$ROUNDS" --preload-rate 5000 2>&1 | grep -v '^round\|^preloaded'
