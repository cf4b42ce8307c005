#!/usr/bin/env bash
# Files from a source node to N edge nodes on a loopback backbone, outside the lab: one
# class of files (COUNT files of SIZE bytes), the seconds until every site has them all,
# what each node said when it stopped (the source's sender totals, each site's
# receiver and backbone totals: NAKs, retransmissions, chunks dropped or not known), and
# each node's CPU by thread over its run (the event loop is `tickwire`, the files thread
# `tickwire-files`).
# For looking into one class at a time, e.g. the 635 KB files to 4 sites that sometimes
# take seconds instead of a fraction of one (a site silent for about 4 s: see
# docs/BENCHMARKS.md, changelog of 2026-11-26).
#
#   cargo build --release -p tickwire-cli
#   bash scripts/files_to_sites.sh                      # 50 x 635,000 bytes to 4 sites
#   SITES=1 COUNT=2000 SIZE=16000 bash scripts/files_to_sites.sh
#   EXTRA_BACKBONE='files_flow_control = "fastest"' bash scripts/files_to_sites.sh
#   FSYNC=always SITES=1 COUNT=2000 SIZE=16000 bash scripts/files_to_sites.sh
#   tickwire backbone keygen > /tmp/bb.keys && chmod 600 /tmp/bb.keys
#   EXTRA_BACKBONE='key_file = "/tmp/bb.keys"' SITES=1 COUNT=1 SIZE=200000000 bash scripts/files_to_sites.sh
#
# TICKWIRE_BIN names the node binary (default target/release/tickwire); KEEP=1 keeps the
# work directory (configs, logs, the source's audit log with each site's times); WORK_BASE
# is where it is made (default /tmp; /dev/shm leaves the disk out of a profile).
# Runs of thousands of small files back to back slow down on ext4 without a journal: the
# kernel does not hand out an inode deleted in the last minutes, and each file created
# after thousands were deleted looks past them (`recently_deleted` in a profile). Compare
# binaries run by run, alternated, or on /dev/shm.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TICKWIRE_BIN:-$here/target/release/tickwire}
SITES=${SITES:-4}
COUNT=${COUNT:-50}
SIZE=${SIZE:-635000}
RATE_MB=${RATE_MB:-200}
FSYNC=${FSYNC:-never}   # every node's [files] fsync (sites' inboxes, the source's spool): always, batch or never
EXTRA_BACKBONE=${EXTRA_BACKBONE:-}
[ -x "$BIN" ] || { echo "no node binary at $BIN (cargo build --release -p tickwire-cli)" >&2; exit 1; }
work=$(mktemp -d "${WORK_BASE:-/tmp}"/tickwire-files-to-sites.XXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
port=$((41000 + RANDOM % 20000))
channel="aeron:udp?endpoint=239.20.31.77:$port|interface=127.0.0.1"
mkdir -p "$work/files"
for i in $(seq -w 1 "$COUNT"); do head -c "$SIZE" /dev/urandom > "$work/files/f$i.dat"; done

node_config() { # name, [files] lines
    printf '[node]\nname = "%s"\n[backbone]\nmtu = 8192\n%s\n[files]\nservices = ["FILES"]\n%s' \
        "$1" "$EXTRA_BACKBONE" "$2"
}
node_config src "$(printf 'spool = "%s"\nrate_mb_per_s = %s\nchunk_kib = 62\nfsync = "%s"\n' "$work/spool" "$RATE_MB" "$FSYNC")" > "$work/src.toml"
"$BIN" node --listen 127.0.0.1:0 --config "$work/src.toml" --backbone "$channel" --role source > "$work/src.log" 2>&1 &
pids+=($!)
names=()
for i in $(seq 1 "$SITES"); do
    node_config "site$i" "$(printf 'inbox = "%s"\nfsync = "%s"\n' "$work/site$i-inbox" "$FSYNC")" > "$work/site$i.toml"
    "$BIN" node --listen 127.0.0.1:0 --config "$work/site$i.toml" --backbone "$channel" --role edge > "$work/site$i.log" 2>&1 &
    pids+=($!)
    names+=("site$i")
done
to=$(IFS=,; echo "${names[*]}")
addr=""
for _ in $(seq 100); do
    addr=$(grep -oE "listening on 127.0.0.1:[0-9]+" "$work/src.log" | head -1 | awk '{print $3}') || true
    [ -n "$addr" ] && break
    sleep 0.1
done
[ -n "$addr" ] || { echo "the source did not start: $(cat "$work/src.log")" >&2; exit 1; }

delivered() { # files named $1 under each inbox's $2 (in the FILES service's directory)
    local n=0
    for i in $(seq 1 "$SITES"); do
        n=$((n + $(find "$work/site$i-inbox/FILES/$2" -name "$1" 2>/dev/null | wc -l)))
    done
    echo "$n"
}
# A first file to every site: they are present and the images are up before the clock.
echo warm > "$work/warm.dat"
for _ in $(seq 30); do
    "$BIN" files send --node "$addr" --to "$to" --as-dir warm "$work/warm.dat" > /dev/null 2>&1
    for _ in $(seq 40); do [ "$(delivered warm.dat warm)" = "$SITES" ] && break 2; sleep 0.05; done
done
t0=$(date +%s.%N)
"$BIN" files send --node "$addr" --to "$to" --as-dir class "$work"/files/*.dat > /dev/null 2>"$work/send.err"
want=$((COUNT * SITES))
for _ in $(seq 30000); do
    [ "$(delivered '*.dat' class)" = "$want" ] && break
    sleep 0.01
done
t1=$(date +%s.%N)
got=$(delivered '*.dat' class)
echo "$COUNT files of $SIZE bytes to $SITES sites: $(echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}') s ($got of $want delivered)"
# Each node's CPU by thread, read before it stops: where the work was done.
cpu_by_thread() { # pid, name
    local hz t s f
    hz=$(getconf CLK_TCK)
    for t in /proc/"$1"/task/*; do
        s=$(cat "$t/stat" 2>/dev/null) || continue
        read -r -a f <<< "${s##*) }"
        echo "$(tr ' ' '_' < "$t/comm" 2>/dev/null) $((f[11] + f[12]))"
    done | awk -v n="$2" -v hz="$hz" '{c[$1] += $2}
        END {for (k in c) if (c[k] > 0) printf "%s: CPU %s %.2f s\n", n, k, c[k] / hz}' | sort
}
node_names=(src "${names[@]}")
for i in "${!pids[@]}"; do cpu_by_thread "${pids[$i]}" "${node_names[$i]}"; done
for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
for f in src $(seq -f 'site%g' 1 "$SITES"); do
    grep -h "sender stopped\|receiver stopped\|backbone stopped\|messages dropped" "$work/$f.log" \
        | sed "s/^[^ ]* *INFO [^ ]* /$f: /" | cut -c1-240
done
[ "$got" = "$want" ]
