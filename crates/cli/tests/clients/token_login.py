#!/usr/bin/env python3
"""A WebSocket API client that authenticates first, written the way the published
tr_json2 examples that do so behave on the wire (requests for the token,
websocket-client's WebSocketApp for the stream):

1. POST https://AUTH_HOST:AUTH_PORT/getToken with the form fields `username` and
   `password`; print the JSON answer; on `"success": false` print
   "Authentication failed" and stop.
2. Otherwise open wss://HOST:PORT/WebSocket (subprotocol tr_json2) with the cookies
   AuthToken (from the answer's Set-Cookie), AuthPosition and applicationId, and send NO
   Login: the server logs the connection in from the cookie and sends the login Refresh
   unasked.
3. On the login Refresh ask for one item with no service (ID 2); answer every Ping
   with a Pong; print every message received, pretty-printed (one key per line).

Certificates are trusted the usual way: REQUESTS_CA_BUNDLE (requests) and
WEBSOCKET_CLIENT_CA_BUNDLE (websocket-client). Run by crates/cli/tests/ws_token.rs."""

import argparse
import json
import sys

import requests
import websocket


def show(label, doc):
    print(label)
    print(json.dumps(doc, sort_keys=True, indent=2, separators=(",", ":")))
    sys.stdout.flush()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hostname", default="127.0.0.1")
    p.add_argument("--port", default="15000")
    p.add_argument("--auth_hostname", default="127.0.0.1")
    p.add_argument("--auth_port", default="15000")
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--app_id", default="256")
    p.add_argument("--position", default="127.0.0.1")
    p.add_argument("--item", default="TRI.N")
    a = p.parse_args()

    print("Sending authentication request...")
    r = requests.post(
        "https://{}:{}/getToken".format(a.auth_hostname, a.auth_port),
        data={"username": a.user, "password": a.password},
        timeout=15,
    )
    answer = r.json()
    show("RECEIVED:", answer)
    if answer.get("success") is not True:
        print("Authentication failed")
        return 0
    token = r.cookies["AuthToken"]
    cookie = "AuthToken={};AuthPosition={};applicationId={};".format(
        token, a.position, a.app_id
    )

    def on_message(ws, text):
        for msg in json.loads(text):
            show("RECEIVED:", msg)
            if msg.get("Type") == "Refresh" and msg.get("Domain") == "Login":
                req = {"ID": 2, "Key": {"Name": a.item}}
                ws.send(json.dumps(req))
                show("SENT:", req)
            elif msg.get("Type") == "Ping":
                ws.send(json.dumps({"Type": "Pong"}))

    url = "wss://{}:{}/WebSocket".format(a.hostname, a.port)
    print("Connecting to WebSocket " + url + " ...")
    app = websocket.WebSocketApp(
        url,
        header=["User-Agent: Python"],
        subprotocols=["tr_json2"],
        cookie=cookie,
        on_message=on_message,
    )
    app.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
