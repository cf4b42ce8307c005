#!/usr/bin/env python3
"""Instructions the node executes per update, counted by valgrind's callgrind.

Timings on a shared 2-vCPU VM spread by up to 50% from run to run; instruction counts
do not depend on the load. For each benchmark of the `lvc` bench binary this runs
callgrind twice, with criterion's --profile-time 1 and 5: the setup (100,000 images,
the subscriber's requests) is the same in both, so the difference in Node::on_frame's
inclusive instruction count divided by the difference in its calls is the cost of one
frame of 1,000 updates, whatever the setup cost.

Usage (the binary is printed by `cargo bench -p tickwire-core --bench lvc --no-run`):

    python3 crates/core/benches/per_update_instructions.py target/release/deps/lvc-HASH \
        [on_frame_subscriber_all_items/reading ...]
"""
import re
import subprocess
import sys
import tempfile

DEFAULT = [
    "on_frame_subscriber_all_items/reading",
    "on_frame_subscriber_all_items/conflating",
    "on_frame_1_subscriber/cache_off",
]
FRAME_UPDATES = 1000
NAME = "tickwire_core::Node::on_frame"


def on_frame_cost(path):
    """Inclusive instructions of Node::on_frame and its calls, from its callers' records."""
    names, fn, cfn, incl, calls, take = {}, None, None, 0, 0, False
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line)
        if m:
            kind, i, n = m.groups()
            if n:
                names[i] = n
            if kind == "fn":
                fn = names.get(i)
            else:
                cfn = names.get(i)
            continue
        m = re.match(r"^calls=(\d+)", line)
        if m:
            # Recursive records (on_frame replaying held frames) are inside the total.
            take = bool(cfn and cfn.endswith(NAME) and not (fn and fn.endswith(NAME)))
            if take:
                calls += int(m.group(1))
            continue
        if take:
            parts = line.split()
            if len(parts) >= 2:
                incl += int(parts[1])
            take = False
    return incl, calls


def run(binary, bench, seconds, out):
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary,
         "--bench", bench, "--profile-time", str(seconds)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=1800,
    )
    return on_frame_cost(out)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary, benches = sys.argv[1], sys.argv[2:] or DEFAULT
    with tempfile.TemporaryDirectory() as tmp:
        for bench in benches:
            i1, c1 = run(binary, bench, 1, f"{tmp}/short.out")
            i5, c5 = run(binary, bench, 5, f"{tmp}/long.out")
            frames = c5 - c1
            if frames <= 0:
                print(f"{bench}: no extra frames measured")
                continue
            per_update = (i5 - i1) / frames / FRAME_UPDATES
            print(f"{bench}: {per_update:,.1f} instructions per update ({frames} frames)")


if __name__ == "__main__":
    main()
