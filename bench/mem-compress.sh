#!/usr/bin/env bash
#   bench/mem-compress.sh [STRATA, default .build/release/strata] [VALUE_SIZE, default 200] [SECONDS, default 10] [ROUNDS, default 3]
# Memory-tier compression (--memory-compression) beside the same build without it, in one
# strata-bench process (targets alternate every round): two fresh nodes, --threads 1
# --memory-limit 64MiB, values JSON documents of VALUE_SIZE bytes (`--values json`), every SET
# to the memory tier only. (1) Hits: 100,000 keys (they fit in both), GET-only, pipeline 16,
# 50 connections: throughput and server CPU per GET. (2) Holding: 1,000,000 more keys set;
# the items each node's 64 MiB holds. Builds the release binaries if missing (bench/need.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/need.sh
need_release
S="${1:-.build/release/strata}"; SIZE=${2:-200}; SECS=${3:-10}; R=${4:-3}
W=$(mktemp -d /tmp/memc-XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
P=$(free_port); C=$(free_port)
"$S" serve --port "$P" --data "$W/p" --threads 1 --memory-limit 64MiB --log-level warn > "$W/p.log" 2>&1 & PPID_=$!
"$S" serve --port "$C" --data "$W/c" --threads 1 --memory-limit 64MiB --memory-compression '*' --log-level warn > "$W/c.log" 2>&1 & CPID=$!
trap 'kill $PPID_ $CPID 2>/dev/null; wait $PPID_ $CPID 2>/dev/null; rm -rf "$W"' EXIT
for p in "$P" "$C"; do for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null && break; sleep 0.1; done; done
echo "plain=$P compressed=$C ($S) $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
T=(--target "strata=127.0.0.1:$P" --target "strata=127.0.0.1:$C" --server-pid "$PPID_" --server-pid "$CPID")
stat_of() { "$S" stats --server "127.0.0.1:$1" --json | python3 -c "import json,sys; d=json.load(sys.stdin); print(' '.join(f'{k}={d.get(k)}' for k in sys.argv[1:]))" "${@:2}"; }
echo "== hits: GET-only p16, 100,000 keys of $SIZE B JSON ($SECS s x $R)"
.build/release/strata-bench run "${T[@]}" --values json --value-size "$SIZE" --tiers memory --get-ratio 1 --keys 100000 --connections 50 --pipeline 16 --duration "$SECS" --rounds "$R" 2>&1 | tail -6
for p in "$P" "$C"; do echo "node $p: $(stat_of "$p" memory_items memory_bytes memory_compressed_items memory_dictionaries memory_dictionary_bytes)"; done
echo "== holding: 1,000,000 keys of $SIZE B JSON set into 64 MiB"
.build/release/strata-bench run "${T[@]}" --values json --value-size "$SIZE" --tiers memory --get-ratio 1 --keys 1000000 --connections 8 --pipeline 16 --ops 1 2>&1 | tail -3
for p in "$P" "$C"; do echo "node $p: $(stat_of "$p" memory_items memory_bytes memory_evictions memory_compressed_items)"; done
