#!/usr/bin/env python3
"""What one `GET /metrics` costs the node: its CPU time per scrape, measured from
/proc while 500 scrapes run back to back, less the node's idle CPU over the same time.

A release node with 100,000 items (the lab's perf-pub at 1,000 updates/s) and its
HTTP port on 127.0.0.1; three runs, median printed. Scrapes ask as Prometheus does
(OpenMetrics), or with `text` for the classic text format (curl, promtool).

    cargo build --release && python3 scripts/metrics_scrape_cost.py [openmetrics|text]
"""
import subprocess, time, urllib.request, os, re, statistics, sys
binary = os.environ.get("TICKWIRE_BIN", "target/release/tickwire")
fmt = sys.argv[1] if len(sys.argv) > 1 else "openmetrics"
if fmt not in ("openmetrics", "text"):
    sys.exit("usage: metrics_scrape_cost.py [openmetrics|text]")
accept = {"openmetrics": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5", "text": "*/*"}[fmt]
def scrape(url): return urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": accept})).read()
node = subprocess.Popen([binary, "node", "--listen", "127.0.0.1:0", "--ws", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
addr = ws = None
for line in node.stderr:
    if "listening on " in line and not addr: addr = line.split("listening on ")[1].split()[0]
    if "WebSocket API on ws://" in line: ws = line.split("ws://")[1].split("/")[0]; break
import threading; threading.Thread(target=lambda: [None for _ in node.stderr], daemon=True).start()
pub = subprocess.Popen([binary, "perf-pub", "--node", addr, "--items", "100000", "--update-rate", "1000", "--duration", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(8)
def cpu():
    f = open(f"/proc/{node.pid}/stat").read().rsplit(")",1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
size = len(scrape(f"http://{ws}/metrics"))
res = []
for run in range(3):
    # Idle baseline of the same length, then scrapes back to back.
    c0 = cpu(); t0 = time.time(); time.sleep(2); idle = (cpu() - c0) / (time.time() - t0)
    n = 500; c0 = cpu(); t0 = time.time()
    for _ in range(n): scrape(f"http://{ws}/metrics")
    el = time.time() - t0; used = cpu() - c0 - idle * el
    res.append(used / n * 1e6)
    print(f"run {run+1}: {used / n * 1e6:.0f} µs of node CPU per scrape ({n} scrapes in {el:.1f} s, {size} bytes each)")
print(f"{fmt}: median {statistics.median(res):.0f} µs per scrape; at one scrape a second: {statistics.median(res)/1e6*100:.3f}% of a core")
pub.terminate(); node.terminate()
