"""A market-data application written against LSEG's own Python library (lseg-data, from
PyPI), pointed at a Tickwire node the way such an application is pointed at a deployed
distribution server: a platform session with `deployed_platform_host`, which speaks the
WebSocket JSON API (tr_json2) to ws://HOST/WebSocket.

Nothing here knows about Tickwire. The script uses the library's public API only (and
gives the library's message queue a first-in-first-out tie-break, see
_FifoPrioritizedMessage):

1. a pricing stream of several items with a field list, with refresh/update/status
   callbacks, as the library's tutorials do;
2. once every item has had --updates updates, a snapshot request
   (`open(with_updates=False)`) of one item through the lower-level OMM stream;
3. then it prints {"event": "streaming"} and waits for every item to turn stale (the
   test stops the feed), and keeps the library's own last values (`get_snapshot()`);
4. an off-stream contribution, which the node must refuse with a clear answer;
5. closes the session.

The last line printed is a JSON summary that the Rust test checks.
"""

import argparse
import itertools
import json
import sys
import threading
import time

import lseg.data as ld
import pandas as pd
from lseg.data.delivery import omm_stream
from lseg.data.delivery._stream import stream_connection


class _FifoPrioritizedMessage(stream_connection.PrioritizedMessage):
    """The library hands each received message to its processing thread through a
    PriorityQueue, a heap, which does not keep the order of messages of equal priority:
    two Updates of one item queued together can be applied in the wrong order, leaving
    the library's last value an older one than the node sent last. (Seen under load.)
    This keeps arrival order among equal priorities, so what the library keeps is what
    the node sent, in the order it sent it."""

    _arrivals = itertools.count()

    def __init__(self, priority, message):
        super().__init__(priority, message)
        self.arrival = next(self._arrivals)

    def __lt__(self, other):
        return (self.priority, self.arrival) < (other.priority, getattr(other, "arrival", 0))

    def __gt__(self, other):
        return (self.priority, self.arrival) > (other.priority, getattr(other, "arrival", 0))


stream_connection.PrioritizedMessage = _FifoPrioritizedMessage
from lseg.data.session import platform


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True, help="host:port of the node's WebSocket API")
    ap.add_argument("--items", required=True, help="comma-separated item names")
    ap.add_argument("--missing", default="NOPE", help="an item the node does not have")
    ap.add_argument("--service", default="FEED")
    ap.add_argument("--fields", default="BID,ASK,TRDPRC_1,ACVOL_1")
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds for each phase")
    args = ap.parse_args()
    items = args.items.split(",")
    fields = args.fields.split(",")

    def out(obj):
        print(json.dumps(obj), flush=True)

    session = platform.Definition(
        app_key="tickwire-compat",
        deployed_platform_host=args.host,
        deployed_platform_username="lseg-data-app",
    ).get_session()
    ld.session.set_default(session)
    session.open()
    summary = {"session": str(session.open_state)}

    lock = threading.Lock()
    refreshes, updates, statuses = {}, {}, {}
    update_fields = set()

    def on_refresh(values, name, stream):
        with lock:
            refreshes[name] = sorted(values.keys())

    def on_update(values, name, stream):
        with lock:
            updates[name] = updates.get(name, 0) + 1
            update_fields.update(values.keys())

    def on_status(status, name, stream):
        with lock:
            statuses.setdefault(name, []).append(status.get("State", {}))

    def wait_until(pred):
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            with lock:
                if pred():
                    return True
            time.sleep(0.05)
        return False

    stream = ld.content.pricing.Definition(
        universe=items + [args.missing], fields=fields, service=args.service
    ).get_stream()
    stream.on_refresh(on_refresh)
    stream.on_update(on_update)
    stream.on_status(on_status)
    stream.open()

    summary["streaming"] = wait_until(
        lambda: all(updates.get(i, 0) >= args.updates for i in items)
    )
    # A snapshot (non-streaming) request through the library's lower-level OMM stream.
    snapshot_messages = []
    done = threading.Event()
    omm = omm_stream.Definition(
        name=items[0], service=args.service, fields=["BID", "ASK"]
    ).get_stream()
    omm.on_refresh(lambda msg, s: snapshot_messages.append(msg))
    omm.on_complete(lambda msg, s: done.set())
    omm.open(with_updates=False)
    done.wait(args.timeout)
    omm.close()

    out({"event": "streaming", "ok": summary["streaming"]})
    # The test now stops the feed; the node tells every stream its data is stale.
    summary["stale"] = wait_until(
        lambda: all(
            any(s.get("Data") == "Suspect" for s in statuses.get(i, [])) for i in items
        )
    )
    snap = stream.get_snapshot()
    last = {}
    for row in snap.to_dict(orient="records"):
        values = {}
        for f in fields:
            v = row.get(f)
            # The library's frame shows a blank as <NA> (or NaN); JSON has null for it.
            if pd.isna(v):
                values[f] = None
            else:
                values[f] = v.item() if hasattr(v, "item") else v
        last[row["Instrument"]] = values
    stream.close()

    # Posting is not supported: the library must get a refusal, not a silence.
    # The library waits for the answer without a time limit: a thread bounds it.
    responses = []
    contributing = threading.Thread(
        target=lambda: responses.append(
            omm_stream.contribute(name=items[0], fields={"BID": 1.0}, service=args.service)
        ),
        daemon=True,
    )
    contributing.start()
    contributing.join(args.timeout)
    response = responses[0] if responses else None
    session.close()

    summary.update(
        {
            "refreshes": refreshes,
            "updates": updates,
            "update_fields": sorted(update_fields),
            "statuses": statuses,
            "last": last,
            "snapshot": snapshot_messages,
            "contribute": (
                {
                    "success": response.is_success,
                    "type": response.type,
                    "nak_code": response.nak_code,
                    "text": str(response),
                }
                if response is not None
                else {"timeout": True}
            ),
        }
    )
    out(summary)


if __name__ == "__main__":
    sys.exit(main())
