#!/usr/bin/env python3
"""A WebSocket API posting client written the way the published tr_json2 posting example
is (websocket-client's WebSocketApp, callbacks, JSON arrays): log in; once the login
Refresh is in, post to an item off-stream (on the login stream, with a Key), first a
Refresh then Updates, each with "Ack": true and a new PostID; then open the item and
post once more on its own stream. Exits once every post has its answer, and prints one
JSON summary line: the Acks, and the item's BID/ASK as a refresh and updates showed them.

Used by crates/cli/tests/websocket.rs against a node whose feed takes posts."""

import argparse
import json
import sys
import threading

import websocket

parser = argparse.ArgumentParser()
parser.add_argument("--url", required=True)
parser.add_argument("--item", default="SYM0")
parser.add_argument("--service", default="FEED")
parser.add_argument("--updates", type=int, default=2, help="posted Updates after the Refresh")
parser.add_argument("--timeout", type=float, default=20.0)
args = parser.parse_args()

seen = {"acks": [], "errors": [], "bid_ask": []}
posts = []  # what was posted, in order
done = threading.Event()
next_post_id = [1]


def post(ws, stream_id, message_type, fields, key=True):
    msg = {
        "ID": stream_id,
        "Type": "Post",
        "Domain": "MarketPrice",
        "Ack": True,
        "PostID": next_post_id[0],
        "PostUserInfo": {"Address": "127.0.0.1", "UserID": 1},
        "Message": {"ID": 0, "Type": message_type, "Domain": "MarketPrice", "Fields": fields},
    }
    if key:
        msg["Key"] = {"Name": args.item, "Service": args.service}
    posts.append({"PostID": next_post_id[0], "Fields": fields, "on_stream": not key})
    next_post_id[0] += 1
    ws.send(json.dumps(msg))


def on_open(ws):
    ws.send(json.dumps({
        "ID": 1, "Domain": "Login",
        "Key": {"Name": "poster", "Elements": {"ApplicationId": "256", "Position": "127.0.0.1/net"}},
    }))


def on_message(ws, text):
    for m in json.loads(text):  # the server always sends an array
        t = m.get("Type")
        if t == "Ping":
            ws.send(json.dumps({"Type": "Pong"}))
        elif m.get("Domain") == "Login" and t == "Refresh":
            seen["support_post"] = m["Key"]["Elements"].get("SupportOMMPost")
            # Off-stream: a Refresh, then Updates, each moving the quote up a cent.
            post(ws, 1, "Refresh", {"BID": 50.0, "ASK": 50.1})
            for i in range(args.updates):
                post(ws, 1, "Update", {"BID": round(50.01 + i / 100, 2), "ASK": round(50.11 + i / 100, 2)})
            # Then the item's own stream.
            ws.send(json.dumps({"ID": 2, "Key": {"Name": args.item, "Service": args.service}}))
        elif t == "Refresh" and m.get("ID") == 2:
            f = m.get("Fields", {})
            seen["bid_ask"].append([f.get("BID"), f.get("ASK")])
            post(ws, 2, "Update", {"BID": 49.5}, key=False)
        elif t == "Update" and m.get("ID") == 2:
            f = m.get("Fields", {})
            seen["bid_ask"].append([f.get("BID"), f.get("ASK")])
        elif t == "Ack":
            seen["acks"].append(m)
        elif t == "Error":
            seen["errors"].append(m)
    if posts and len(seen["acks"]) >= len(posts) and seen["bid_ask"] and seen["bid_ask"][-1][0] == 49.5:
        done.set()


app = websocket.WebSocketApp(args.url, subprotocols=["tr_json2"], on_open=on_open, on_message=on_message)
thread = threading.Thread(target=app.run_forever, daemon=True)
thread.start()
ok = done.wait(args.timeout)
app.close()
print(json.dumps({
    "ok": ok,
    "support_post": seen.get("support_post"),
    "posts": posts,
    "acks": seen["acks"],
    "bid_ask": seen["bid_ask"],
    "errors": seen["errors"],
}))
sys.exit(0 if ok else 1)
