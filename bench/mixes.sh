#!/bin/bash
# Workloads 1, 3 and 5 of bench/anchors.sh (90/10 at pipeline 1: 100 B uniform, 10 KiB, 1 KiB zipf 0.99)
# against Strata at its defaults (--threads 1), memcached -t 1, Redis without AOF and Redis with AOF everysec,
# one strata-bench run per workload (targets alternate every round; medians). Bounded: 3 × 4 × 3 × 30 s.
#   bench/mixes.sh   (after swift build -c release --product strata and --product strata-bench)
set -u
cd "$(dirname "$0")/.."
W=$(mktemp -d /tmp/w135-XXXXXX)
fp() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
PS=$(fp); PM=$(fp); PR=$(fp); PA=$(fp)
.build/release/strata serve --host 127.0.0.1 --port $PS --data $W/s --threads 1 --log-level warn > $W/s.log 2>&1 & S=$!
memcached -l 127.0.0.1 -p $PM -t 1 -m 1024 -U 0 -u root > /dev/null 2>&1 & M=$!
redis-server --bind 127.0.0.1 --port $PR --save '' --appendonly no --dir $W > /dev/null 2>&1 & R=$!
mkdir -p $W/aof; redis-server --bind 127.0.0.1 --port $PA --save '' --appendonly yes --appendfsync everysec --dir $W/aof > /dev/null 2>&1 & A=$!
sleep 1
for args in "1 --value-size 100 --keys 100000" "3 --value-size 10KiB --keys 20000" "5 --zipf 0.99 --value-size 1KiB --keys 100000"; do
  set -- $args; n=$1; shift
  echo "== workload $n"
  .build/release/strata-bench run --target strata=127.0.0.1:$PS --target memcached=127.0.0.1:$PM --target redis=127.0.0.1:$PR --target redis=127.0.0.1:$PA \
    --server-pid $S --server-pid $M --server-pid $R --server-pid $A "$@" --connections 50 --pipeline 1 --duration 30 --rounds 3 2>/dev/null | grep -v "^round"
done
echo "strata log_*:"; .build/release/strata stats --server 127.0.0.1:$PS 2>/dev/null | grep -E "^log_backlog|^log_backpressure" 
kill $S $M $R $A; wait 2>/dev/null; rm -rf $W
