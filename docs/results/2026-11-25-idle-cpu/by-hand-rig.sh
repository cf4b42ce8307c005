#!/bin/bash
# The by-hand latency rig of docs/BENCHMARKS.md, "Latency: the idle CPU under the floor".
# usage: by-hand-rig.sh RATE SECS
# env: HP      guest_halt_poll_ns for the run (needs root; the previous value is restored)
#      PUB, NODE, SUB   taskset CPU list for perf-pub, the node, perf-sub (empty: unpinned)
#      WAIT    the node's [node] wait (default block)
#      SPIN    perf-pub --spin-us (default 200)
#      SLICE   scheduler slice in µs for the processes named in SLICE_ON (default all
#              three: node pub sub), set with slice.py once they run
# Prints the mean latency over seconds 3.. and the median of the per-second p99s.
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
T=${BIN:-target/release/tickwire}
RATE=$1; SECS=$2
HPF=/sys/module/haltpoll/parameters/guest_halt_poll_ns
if [ -n "$HP" ]; then OLD_HP=$(cat $HPF); echo "$HP" > $HPF; trap 'echo $OLD_HP > $HPF' EXIT; fi
D=$(mktemp -d "${TMPDIR:-/tmp}/rig.XXXX")
ts() { if [ -n "$1" ]; then echo "taskset -c $1"; fi; }
printf "[node]\nwait = \"%s\"\n" "${WAIT:-block}" > $D/n.toml
P1=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
$(ts $NODE) $T node --listen 127.0.0.1:$P1 --cache off --heartbeat-ms 5000 --config $D/n.toml > $D/node.log 2>&1 & NP=$!
sleep 1
$(ts $PUB) $T perf-pub --system tickwire --node 127.0.0.1:$P1 --items 100000 --json --duration $((SECS+4)) --update-rate $RATE --tick-rate 1000 --latency-rate 1000 --flush-every 8 --spin-us ${SPIN:-200} > $D/pub.json 2>$D/pub.err & PP=$!
sleep 0.5
$(ts $SUB) $T perf-sub --node 127.0.0.1:$P1 --items 100000 --connections 1 --commonality all --wait block --json --duration $SECS > $D/sub.json 2>$D/sub.err & SP=$!
sleep 0.3
if [ -n "$SLICE" ]; then
  python3 "$HERE/slice.py" $SLICE $(for w in ${SLICE_ON:-node pub sub}; do case $w in node) echo $NP;; pub) echo $PP;; sub) echo $SP;; esac; done)
fi
wait $SP
kill $PP 2>/dev/null; wait $PP 2>/dev/null || true
kill -INT $NP 2>/dev/null; wait || true
python3 - $D <<'PY'
import json,sys,statistics
d=sys.argv[1]
L=[json.loads(l) for l in open(d+'/sub.json') if '"second"' in l]
L=[l for l in L if l['t']>=3]
n=sum(l['lat_count'] for l in L); m=sum(l['lat_mean_ns']*l['lat_count'] for l in L)/n
p99=sorted(l['lat_p99_ns'] for l in L)
print("%s mean %.0f us, per-second p99 median %.0f (min %.0f max %.0f), secs %d" % (d, m/1e3, statistics.median(p99)/1e3, p99[0]/1e3, p99[-1]/1e3, len(L)))
PY
