"""Wake-ups per second per thread of idle Python clients of one node (nothing flowing),
from /proc/PID/task/*/schedstat (its third field) over SECONDS after 4 s; modes are
those of idle_client.py (sub next pub aio anext live). Prints one JSON line.

usage: python idle_wakeups.py PYTHON TICKWIRE_BIN SECONDS MODE..."""
import os, subprocess, sys, time, json

py, tw, secs, modes = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
node = subprocess.Popen([tw, "node", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
addr = None
for line in node.stdout:
    if "listening on " in line:
        addr = line.split("listening on ")[1].split()[0]
        break
# the idle service's publisher (a native one, so that subscribers get an image)
feeder = subprocess.Popen([py, os.path.join(os.path.dirname(__file__), "idle_client.py"), "pub", addr], stdout=subprocess.PIPE, text=True)
assert feeder.stdout.readline().strip() == "ready"
procs = {}
for m in modes:
    if m == "pub":
        procs[m] = feeder
        continue
    p = subprocess.Popen([py, os.path.join(os.path.dirname(__file__), "idle_client.py"), m, addr], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready", m
    procs[m] = p
time.sleep(4)

def counts(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                n = int(f.read().split()[2])
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        out[tid] = (name, n)
    return out

before = {m: counts(p.pid) for m, p in procs.items()}
time.sleep(secs)
after = {m: counts(p.pid) for m, p in procs.items()}
result = {}
for m in modes:
    threads = {}
    for tid, (name, n) in after[m].items():
        if tid in before[m]:
            threads[f"{name}:{'main' if tid == str(procs[m].pid) else tid}"] = round((n - before[m][tid][1]) / secs, 2)
    result[m] = {"total": round(sum(threads.values()), 2), "threads": threads, "alive": procs[m].poll() is None}
print(json.dumps(result))
for p in [*procs.values(), feeder]:
    if p.poll() is None:
        p.kill()
node.terminate(); node.wait(10)
