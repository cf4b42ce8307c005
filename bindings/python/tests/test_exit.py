"""A program exits with its own exit code while tickwire's threads wait: its daemon
thread in ``Subscriber.next()`` and a ``LiveView``'s thread, both taking a feed's
updates. Before CPython 3.14 a thread that takes the GIL back once the interpreter is
finalizing is ended with ``pthread_exit``, which aborted the process (SIGABRT) when it
came out of one of tickwire's waits: most runs did."""

from __future__ import annotations

import collections
import subprocess
import sys

from conftest import Proc

# Each run's bound: it normally takes well under a second.
RUN_TIMEOUT = 60.0
RUNS = 10

CHILD = """
import sys, threading, tickwire

address, code = sys.argv[1], int(sys.argv[2])
sub = tickwire.Subscriber(address)
sub.subscribe("FEED", ["SYM0", "SYM1", "SYM2"])
waiting = threading.Event()

def take():
    waiting.set()
    while True:
        sub.next()

threading.Thread(target=take, daemon=True).start()
view = tickwire.LiveView(address, "FEED", ["SYM0", "SYM1"])
view.wait_ready()
waiting.wait()
print("exiting", flush=True)
if code:
    sys.exit(code)
"""


def _run_child(node: str, code: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CHILD, node, str(code)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )


def test_a_program_exits_with_its_code_while_tickwire_threads_wait(node: str, feed: Proc):
    outcomes = collections.Counter()
    failures = []
    for code in (0, 5):
        for _ in range(RUNS):
            run = _run_child(node, code)
            outcomes[(code, run.returncode)] += 1
            if run.returncode != code or run.stdout.strip() != "exiting":
                failures.append(f"exit code {run.returncode} (meant {code}); stderr:\n{run.stderr[-2000:]}")
    summary = ", ".join(f"meant {c}: {n} x {rc}" for (c, rc), n in sorted(outcomes.items()))
    assert not failures, f"{len(failures)} of {2 * RUNS} runs did not exit as meant ({summary}); the first: {failures[0]}"
