#!/usr/bin/env python3
"""A WebSocket API client written the way the published tr_json2 example applications
are (websocket-client's WebSocketApp, callbacks, JSON arrays): log in, on the login
Refresh request items (one by one, or as a batch with a view), answer every Ping with a
Pong, and exit once enough updates arrived. Prints one JSON summary line.

Used by crates/cli/tests/websocket.rs to check that a second, independent WebSocket
implementation (Python's websocket-client) works against the node unchanged."""

import argparse
import json
import sys
import threading

import websocket

parser = argparse.ArgumentParser()
parser.add_argument("--url", required=True)
parser.add_argument("--items", default="SYM0")
parser.add_argument("--service", default=None)
parser.add_argument("--batch", action="store_true")
parser.add_argument("--view", default=None)
parser.add_argument("--updates", type=int, default=10)
parser.add_argument("--timeout", type=float, default=20.0)
args = parser.parse_args()

items = args.items.split(",")
seen = {"login": None, "refreshes": {}, "updates": {}, "statuses": [], "pings": 0, "errors": []}
done = threading.Event()


def on_open(ws):
    ws.send(json.dumps({
        "ID": 1, "Domain": "Login",
        "Key": {"Name": "example-user", "Elements": {"ApplicationId": "256", "Position": "127.0.0.1/net"}},
    }))


def send_requests(ws):
    key = {"Name": items if args.batch else None}
    if args.service:
        key["Service"] = args.service
    base = {}
    if args.view:
        base["View"] = args.view.split(",")
    if args.batch:
        ws.send(json.dumps(dict(base, ID=2, Key=key)))
    else:
        for i, name in enumerate(items):
            k = dict(key, Name=name)
            ws.send(json.dumps(dict(base, ID=2 + i, Key=k)))


def on_message(ws, text):
    for m in json.loads(text):  # the server always sends an array
        t = m.get("Type")
        if t == "Ping":
            seen["pings"] += 1
            ws.send(json.dumps({"Type": "Pong"}))
        elif m.get("Domain") == "Login" and t == "Refresh":
            seen["login"] = m
            send_requests(ws)
        elif t == "Refresh":
            seen["refreshes"][m["Key"]["Name"]] = m
        elif t == "Update":
            name = m["Key"]["Name"]
            seen["updates"].setdefault(name, []).append(m)
        elif t == "Status":
            seen["statuses"].append(m)
        elif t == "Error":
            seen["errors"].append(m)
    if all(len(seen["updates"].get(n, [])) >= args.updates for n in items):
        done.set()
        ws.close()


app = websocket.WebSocketApp(args.url, subprotocols=["tr_json2"], on_open=on_open, on_message=on_message)
thread = threading.Thread(target=app.run_forever, daemon=True)
thread.start()
ok = done.wait(args.timeout)
app.close()
summary = {
    "ok": ok,
    "login_state": seen["login"]["State"] if seen["login"] else None,
    "ping_timeout": seen["login"]["Elements"]["PingTimeout"] if seen["login"] else None,
    "refreshes": {n: sorted(r.get("Fields", {}).keys()) for n, r in seen["refreshes"].items()},
    "updates": {n: len(u) for n, u in seen["updates"].items()},
    "update_fields": sorted({k for u in seen["updates"].values() for m in u for k in m.get("Fields", {})}),
    "seq_ok": all(
        all(b["SeqNumber"] == a["SeqNumber"] + b.get("ConflationInfo", {}).get("Count", 1) for a, b in zip(u, u[1:]))
        for u in seen["updates"].values()
    ),
    # With a view, updates without a viewed field are not sent: numbers only increase.
    "seq_increasing": all(
        all(b["SeqNumber"] > a["SeqNumber"] for a, b in zip(u, u[1:])) for u in seen["updates"].values()
    ),
    "statuses": [s["State"] for s in seen["statuses"]],
    "errors": seen["errors"],
}
print(json.dumps(summary))
sys.exit(0 if ok else 1)
