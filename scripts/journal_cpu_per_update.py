#!/usr/bin/env python3
"""What journaling every update costs the node: its CPU time per update (every thread,
the journal's too, from /proc) at a fixed rate, without a journal and with every update
journaled under each sync policy, runs alternating.

A release node with the cache on, 10,000 items, the lab's perf-pub at --rate updates/s
and perf-sub reading everything; the node's CPU is read over 8 s once both run.

    cargo build --release && python3 scripts/journal_cpu_per_update.py [--rate 500000] [--runs 3]
"""
import argparse, os, shutil, statistics, subprocess, tempfile, threading, time

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--rate", type=int, default=500_000, help="updates/s (default 500000)")
parser.add_argument("--runs", type=int, default=3, help="runs of each configuration (default 3)")
parser.add_argument("--configs", default="off,batch,never", help="off (no journal), always, batch, never")
args = parser.parse_args()
binary = os.environ.get("TICKWIRE_BIN", "target/release/tickwire")
ticks = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / ticks


def one(sync):
    work = tempfile.mkdtemp(prefix="tickwire-jcpu-")
    cfg = os.path.join(work, "node.toml")
    with open(cfg, "w") as f:
        if sync != "off":
            f.write(f'[journal]\ndir = "{work}/journal"\nservices = ["*"]\nsync = "{sync}"\nupdates = true\n')
    node = subprocess.Popen([binary, "node", "--config", cfg, "--listen", "127.0.0.1:0", "--cache", "on"],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "TICKWIRE_LOG": "info"})
    addr = None
    for line in node.stderr:
        if "listening on " in line:
            addr = line.split("listening on ")[1].split()[0]
            break
    threading.Thread(target=lambda: [None for _ in node.stderr], daemon=True).start()
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pub = subprocess.Popen([binary, "perf-pub", "--node", addr, "--items", "10000",
                            "--update-rate", str(args.rate), "--duration", "30"], **quiet)
    time.sleep(3)
    sub = subprocess.Popen([binary, "perf-sub", "--node", addr, "--items", "10000", "--duration", "30"], **quiet)
    time.sleep(3)
    c0, t0 = cpu_s(node.pid), time.time()
    time.sleep(8)
    used, el = cpu_s(node.pid) - c0, time.time() - t0
    for p in (sub, pub, node):
        p.terminate()
        p.wait()
    shutil.rmtree(work, ignore_errors=True)
    return used * 1e9 / (args.rate * el)


configs = args.configs.split(",")
res = {c: [] for c in configs}
for run in range(args.runs):
    for c in configs:
        ns = one(c)
        res[c].append(ns)
        print(f"run {run + 1}: journal {c:6} {ns:5.0f} ns of node CPU per update at {args.rate}/s", flush=True)
for c in configs:
    print(f"journal {c:6} median {statistics.median(res[c]):.0f} ns per update ({', '.join(f'{v:.0f}' for v in res[c])})")
