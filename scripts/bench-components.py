#!/usr/bin/env python3
"""The current component figures of docs/BENCHMARKS.md: every `cargo bench` of the
workspace (criterion, in process, no sockets) three times in rotated order, then one
table: each benchmark's median over the runs of criterion's median estimate, its spread
and the number of runs, in nanoseconds per element (per update, per message: the
benchmark's declared throughput) or per iteration where it declares bytes.

    python3 scripts/bench-components.py [OUT]    # default OUT: docs/results/current/components.md

About 10 minutes on 2 CPUs; run it on a quiet machine with nothing else building.
"""
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHES = [  # (package, bench target)
    ("tickwire-core", "lvc"),
    ("tickwire-client", "client"),
    ("tickwire-gateway", "ws_framing"),
    ("tickwire-backbone", "seal"),
    ("tickwire-rssl", "session"),
]  # (tickwire-proto's `image` prints its own medians: no criterion)
CRITERION_ARGS = ["--warm-up-time", "1", "--measurement-time", "3"]
ROUNDS = int(os.environ.get("ROUNDS", "3"))


def criterion_dir() -> Path:
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    return Path(target) / "criterion"


def results_since(start: float) -> dict:
    """Every benchmark criterion wrote after `start`: id -> (ns, unit)."""
    found = {}
    for meta in criterion_dir().glob("**/new/benchmark.json"):
        if meta.stat().st_mtime < start:
            continue
        bench = json.loads(meta.read_text())
        est = json.loads((meta.parent / "estimates.json").read_text())
        ns = est["median"]["point_estimate"]
        tp = bench.get("throughput") or {}
        if "Elements" in tp:
            found[bench["full_id"]] = (ns / tp["Elements"], "ns per element")
        elif "Bytes" in tp:
            found[bench["full_id"]] = (ns, f"ns per {tp['Bytes']}-byte message")
        else:
            found[bench["full_id"]] = (ns, "ns per iteration")
    return found


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs/results/current/components.md"
    subprocess.run(["cargo", "bench", "--locked", "--no-run"] +
                   [a for p, b in BENCHES for a in ("-p", p, "--bench", b)], cwd=ROOT, check=True)
    runs: dict = {}
    order: list = []
    for r in range(ROUNDS):
        for k in range(len(BENCHES)):
            package, bench = BENCHES[(k + r) % len(BENCHES)]
            print(f"== round {r + 1}: {package} {bench}", file=sys.stderr, flush=True)
            # Only what this bench writes: the previous one's files are older.
            start = time.time()
            subprocess.run(["cargo", "bench", "--locked", "-p", package, "--bench", bench, "--"] +
                           CRITERION_ARGS, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
            for bid, (ns, unit) in sorted(results_since(start).items()):
                key = (f"{package} {bench}", bid, unit)
                if key not in runs:
                    order.append(key)
                runs.setdefault(key, []).append(ns)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "unknown CPU")
    lines = [
        f"Commit {commit}; {cpu}, {os.cpu_count()} CPUs; `python3 scripts/bench-components.py` "
        f"({ROUNDS} rounds of `cargo bench -p PACKAGE --bench BENCH -- {' '.join(CRITERION_ARGS)}`).",
        "",
        "| bench | benchmark | median | spread | runs | unit |",
        "|---|---|---:|---:|---:|---|",
    ]
    for key in order:
        target, bid, unit = key
        v = sorted(runs[key])
        lines.append(f"| {target} | `{bid}` | {statistics.median(v):,.1f} | "
                     f"{v[0]:,.1f} – {v[-1]:,.1f} | {len(v)} | {unit} |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
