#!/usr/bin/env bash
# Market data beside a storm of new TLS connections: a node with [tls] (a new RSA-2048
# certificate), perf-pub at 10,000 updates/s and perf-sub on 1,000 items, both over TLS;
# the subscriber's steady latency is held for HOLD_S seconds (default 6) without new
# connections, then as long while Python clients from four loopback addresses
# (127.0.0.2 to .5) each make RATE full handshakes a second (under the node's default
# cap: 250 a second, a quarter from one address). RUNS pairs, printed as they come, then
# the medians.
#
#   cargo build --release -p tickwire-cli -p tickwire-bench
#   bash scripts/tls_handshakes_beside_data.sh
#   RATE=55 RUNS=5 bash scripts/tls_handshakes_beside_data.sh
#
# TICKWIRE_BIN names the node binary (default target/release/tickwire): compare two
# builds by running the script once with each, alternated. PIN=1 puts the node on CPU 0
# and every load tool on CPU 1 (the load's own CPU then does not take the node's).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TICKWIRE_BIN:-$here/target/release/tickwire}
LAB=${TICKWIRE_BENCH_BIN:-$here/target/release/tickwire-bench}
RATE=${RATE:-25}
RUNS=${RUNS:-3}
HOLD_S=${HOLD_S:-6}
PIN=${PIN:-0}
for b in "$BIN" "$LAB"; do
    [ -x "$b" ] || { echo "no binary at $b (cargo build --release -p tickwire-cli -p tickwire-bench)" >&2; exit 1; }
done
command -v openssl > /dev/null || { echo "openssl is needed for the certificate" >&2; exit 1; }
work=$(mktemp -d /tmp/tickwire-tls-storm.XXXX)
node_pid=""
cleanup() {
    [ -n "$node_pid" ] && kill -INT "$node_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
node_cpu="" load_cpu=""
if [ "$PIN" = 1 ]; then node_cpu="taskset -c 0"; load_cpu="taskset -c 1"; fi

openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/node.key" -out "$work/node.pem" \
    -days 2 -subj /CN=127.0.0.1 -addext "subjectAltName=IP:127.0.0.1" \
    -addext "basicConstraints=critical,CA:FALSE" 2> /dev/null
printf '[tls]\ncert = "%s"\nkey = "%s"\n' "$work/node.pem" "$work/node.key" > "$work/node.toml"
cat > "$work/storm.py" <<'EOF'
import socket, ssl, sys, threading, time
port, seconds, ca, rate = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
ctx = ssl.create_default_context(cafile=ca)
done = {}
def storm(src):
    ok = failed = 0
    t0 = time.time()
    n = 0
    while time.time() - t0 < seconds:
        n += 1
        s = socket.socket()
        try:
            s.bind((src, 0))
            s.connect(("127.0.0.1", port))
            ctx.wrap_socket(s, server_hostname="127.0.0.1").close()
            ok += 1
        except OSError:
            failed += 1
            s.close()
        due = t0 + n / rate
        if due > time.time():
            time.sleep(due - time.time())
    done[src] = (ok, failed)
threads = [threading.Thread(target=storm, args=(f"127.0.0.{i}",)) for i in range(2, 6)]
for t in threads: t.start()
for t in threads: t.join()
print(sum(v[0] for v in done.values()), sum(v[1] for v in done.values()))
EOF

port=$((41000 + RANDOM % 20000))
# One run: latency held without (storm=0) or with (storm=1) new connections. Prints
# "p50 p99 p999 handshakes failed loop_ms tls_ms" (microseconds; the node's CPU by thread).
one_run() {
    local storm=$1
    $node_cpu "$BIN" node --listen "127.0.0.1:$port" --rssl off --config "$work/node.toml" > "$work/node.log" 2>&1 &
    node_pid=$!
    for _ in $(seq 100); do grep -q "listening on" "$work/node.log" && break; sleep 0.05; done
    $load_cpu "$LAB" perf-pub --node "127.0.0.1:$port" --tls --ca "$work/node.pem" --items 1000 \
        --update-rate 10000 --duration $((HOLD_S + 3)) --json > "$work/pub.json" 2> "$work/pub.err" &
    local pub=$!
    sleep 1
    local storm_pid=""
    if [ "$storm" = 1 ]; then
        $load_cpu python3 "$work/storm.py" "$port" "$((HOLD_S + 1))" "$work/node.pem" "$RATE" > "$work/storm.out" &
        storm_pid=$!
    fi
    $load_cpu "$LAB" perf-sub --node "127.0.0.1:$port" --tls --ca "$work/node.pem" --items 1000 \
        --duration "$HOLD_S" --json > "$work/sub.json" 2> "$work/sub.err"
    wait "$pub"
    [ -n "$storm_pid" ] && wait "$storm_pid"
    local hz loop tls
    hz=$(getconf CLK_TCK)
    loop=0 tls=0
    for t in /proc/"$node_pid"/task/*; do
        local f c
        read -r -a f <<< "$(cut -d')' -f2- "$t/stat")"
        c=$(( (f[11] + f[12]) * 1000 / hz ))
        case "$(cat "$t/comm")" in
            tickwire-tls) tls=$((tls + c)) ;;
            tickwire) loop=$((loop + c)) ;;
        esac
    done
    kill -INT "$node_pid"; wait "$node_pid" || true; node_pid=""
    local storm_counts="0 0"
    [ "$storm" = 1 ] && storm_counts=$(cat "$work/storm.out")
    grep '"summary"' "$work/sub.json" | python3 -c '
import json, sys
d = json.load(sys.stdin)["summary"]["steady"]["latency"]
print(d["p50_ns"] // 1000, d["p99_ns"] // 1000, d["p999_ns"] // 1000, end=" ")' || echo -n "- - - "
    echo "$storm_counts $loop $tls"
}

echo "node $BIN; $((RATE * 4)) handshakes/s at most (RSA-2048) beside 10,000 updates/s over TLS; ${HOLD_S} s held; PIN=$PIN"
printf '%-6s %-6s %8s %8s %8s %11s %7s %13s %12s\n' run storm p50_us p99_us p999_us handshakes failed loop_cpu_ms tls_cpu_ms
quiet=() storm=()
for r in $(seq 1 "$RUNS"); do
    for s in 0 1; do
        read -r p50 p99 p999 ok failed loop tls <<< "$(one_run "$s")"
        printf '%-6s %-6s %8s %8s %8s %11s %7s %13s %12s\n' "$r" "$s" "$p50" "$p99" "$p999" "$ok" "$failed" "$loop" "$tls"
        if [ "$s" = 0 ]; then quiet+=("$p99"); else storm+=("$p99"); fi
    done
done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "p99 median of $RUNS: without new connections $(median "${quiet[@]}") us, during the storm $(median "${storm[@]}") us"
