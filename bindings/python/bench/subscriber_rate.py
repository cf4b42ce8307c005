"""How many updates per second one Python subscriber takes.

Starts a node and the lab's load publisher (`tickwire perf-pub`, the lab's 74-byte
payload) from the release binary, subscribes one `tickwire.Subscriber` to every item,
and counts the updates it takes in each of several windows while the publisher offers
more than it can take (the node conflates for it: its default slow-consumer policy).
Every event's fields are read as a user would (a dict by field name).

    cargo build --release
    python bindings/python/bench/subscriber_rate.py [--runs 5] [--seconds 5]

Prints one line per run and the median with its spread, and the Python process's CPU
time per update.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import tickwire

REPO = pathlib.Path(__file__).resolve().parents[3]


def start(binary: str, args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def node_address(proc: subprocess.Popen) -> str:
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    for line in proc.stderr:
        if "listening on " in line:
            # The node goes on logging: leave its output to a thread that drains it.
            import threading

            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return line.split("listening on ")[1].split()[0]
        if time.monotonic() > deadline:
            break
    raise SystemExit("the node did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="measurement windows (default 5)")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each window (default 5)")
    ap.add_argument("--items", type=int, default=1000, help="items subscribed (default 1000)")
    ap.add_argument("--offered", type=int, default=500_000, help="updates/s the publisher offers (default 500000)")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    a = ap.parse_args()
    binary = os.environ.get("TICKWIRE_BIN") or str(REPO / "target" / "release" / "tickwire")
    if not os.path.exists(binary):
        raise SystemExit(f"no binary at {binary}: cargo build --release (or set TICKWIRE_BIN)")

    node = start(binary, ["node", "--listen", "127.0.0.1:0"])
    publisher = None
    try:
        addr = node_address(node)
        duration = int(a.runs * a.seconds + 60)
        publisher = start(
            binary,
            ["perf-pub", "--node", addr, "--items", str(a.items), "--update-rate", str(a.offered),
             "--duration", str(duration)],
        )
        s = tickwire.Subscriber(addr)
        s.wait_for_service("FEED", timeout=30)
        names = [f"SYM{i}" for i in range(a.items)]
        s.subscribe("FEED", names)
        pending = set(names)
        while pending:
            event = s.next(timeout=30)
            if event is None:
                raise SystemExit(f"no refresh of {len(pending)} items")
            if event.type == "refresh":
                pending.discard(event.item)
        rates, cpu_ns = [], []
        for run in range(a.runs):
            n = 0
            touched = 0
            cpu0, t0 = time.process_time(), time.monotonic()
            end = t0 + a.seconds
            while time.monotonic() < end:
                for event in s.next_batch(0.1):
                    if event.type == "update":
                        n += 1
                        touched += len(event.fields)
            elapsed, cpu = time.monotonic() - t0, time.process_time() - cpu0
            rates.append(n / elapsed)
            cpu_ns.append(cpu / max(n, 1) * 1e9)
            if not a.json:
                print(f"run {run + 1}: {n / elapsed:,.0f} updates/s, {cpu / elapsed:.0%} of a core, "
                      f"{cpu / max(n, 1) * 1e9:,.0f} ns CPU per update ({touched / max(n, 1):.1f} fields each)")
        result = {
            "updates_per_s_median": statistics.median(rates),
            "updates_per_s_min": min(rates),
            "updates_per_s_max": max(rates),
            "cpu_ns_per_update_median": statistics.median(cpu_ns),
            "runs": a.runs,
            "seconds": a.seconds,
            "items": a.items,
            "offered": a.offered,
            "python": sys.version.split()[0],
        }
        if a.json:
            print(json.dumps(result))
        else:
            print(f"median {result['updates_per_s_median']:,.0f} updates/s "
                  f"({result['updates_per_s_min']:,.0f}-{result['updates_per_s_max']:,.0f}), "
                  f"{result['cpu_ns_per_update_median']:,.0f} ns CPU per update")
        s.disconnect()
    finally:
        for p in (publisher, node):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(10)


if __name__ == "__main__":
    main()
