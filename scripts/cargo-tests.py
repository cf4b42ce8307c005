#!/usr/bin/env python3
"""Every Rust test of the workspace, as `cargo test --workspace --locked` runs them (unit,
property, fuzz-corpus replay, integration and doc tests), in less wall time.

Cargo runs test binaries one after the other, and the longest ones spend most of their
time waiting on the processes they start. So this builds every test binary once
(`cargo test --workspace --no-run`), then runs them itself, each from its package's
folder as cargo does:
  1. LSEG's Java tools (rssl_interop) beside every other binary but the lab's, which
     run one after the other, then the doc tests (`cargo test --doc`);
  2. then the lab's two binaries (lab, lab_files), which load the machine, beside each
     other.
(Running them through `cargo test --test NAME` instead would resolve features for
that selection alone, and rebuild part of the workspace.) A binary run in the
background writes to target/test-NAME.log, printed when it ends. It fails if any test
fails, after every run has ended.

    python3 scripts/cargo-tests.py
"""

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
# Run beside the other tests (mostly waiting on sockets and processes).
BESIDE_THE_REST = ["rssl_interop"]
# Run last, beside each other: they load the machine.
LAB = ["lab", "lab_files"]
START = time.monotonic()


def say(what):
    print(f"== cargo-tests, {time.monotonic() - START:.0f} s: {what}", flush=True)


class Binary(NamedTuple):
    package: str
    name: str
    executable: str
    package_dir: str


def test_binaries():
    """Builds every test binary; returns them in cargo's order (by package, then
    target)."""
    build = subprocess.run(
        ["cargo", "test", "--workspace", "--locked", "--no-run",
         "--message-format=json-render-diagnostics"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    if build.returncode != 0:
        sys.exit(build.returncode)
    binaries = []
    for line in build.stdout.splitlines():
        msg = json.loads(line)
        if (msg.get("reason") == "compiler-artifact" and msg.get("executable")
                and msg["profile"]["test"]):
            binaries.append(Binary(
                package=msg["package_id"],
                name=msg["target"]["name"],
                executable=msg["executable"],
                package_dir=str(Path(msg["manifest_path"]).parent),
            ))
    binaries.sort(key=lambda b: (b.package, b.name))
    names = {b.name for b in binaries}
    for name in BESIDE_THE_REST + LAB:
        if name not in names:
            sys.exit(f"no test binary named {name} was built")
    return binaries


def run_in_background(binary):
    """Starts a test binary, its output to target/test-NAME.log."""
    log = open(ROOT / "target" / f"test-{binary.name}.log", "w")
    print(f"     Running {binary.name} in the background ({binary.executable})", flush=True)
    proc = subprocess.Popen([binary.executable], cwd=binary.package_dir, stdout=log,
                            stderr=subprocess.STDOUT)
    return binary.name, log, proc


def finish(background, failed):
    """Waits for the binaries started in the background; prints what each wrote."""
    for name, log, proc in background:
        code = proc.wait()
        log.close()
        print(f"     Ran {name} in the background", flush=True)
        sys.stdout.write((ROOT / "target" / f"test-{name}.log").read_text())
        sys.stdout.flush()
        if code != 0:
            failed.append(f"{name} (target/test-{name}.log)")


def main():
    say("building")
    binaries = test_binaries()
    failed = []
    say(f"{', '.join(BESIDE_THE_REST)} beside the other tests")
    background = [run_in_background(b) for b in binaries if b.name in BESIDE_THE_REST]
    for b in binaries:
        if b.name in BESIDE_THE_REST or b.name in LAB:
            continue
        print(f"     Running {b.name} ({b.executable})", flush=True)
        if subprocess.run([b.executable], cwd=b.package_dir).returncode != 0:
            failed.append(b.name)
    if subprocess.run(["cargo", "test", "--workspace", "--locked", "--doc"],
                      cwd=ROOT).returncode != 0:
        failed.append("doc tests")
    finish(background, failed)
    say(f"{' beside '.join(LAB)}")
    finish([run_in_background(b) for b in binaries if b.name in LAB], failed)
    say("done")
    if failed:
        print("FAILED: " + ", ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
