#!/usr/bin/env bash
# Every Rust test of the workspace (unit, property, fuzz-corpus replay, integration and
# doc tests), as `cargo test --workspace` runs them, in less wall time. Cargo runs test
# binaries one after the other, and the longest ones spend most of their time waiting
# on the processes they start, so:
#   1. LSEG's Java tools (rssl_interop) run beside all the other tests but the lab's;
#   2. then the lab's two binaries (lab, lab_files), which load the machine, run beside
#      each other.
# A binary run in the background writes its output to target/test-NAME.log, printed
# when it ends. The script fails if any test fails, after every run has ended.
#
#   bash scripts/cargo-tests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The binaries run on their own (below); every other one runs in one `cargo test`.
LONG_TESTS=(rssl_interop lab lab_files)
# Every other integration test target of the workspace, as `--test NAME` flags, and
# `--exclude NAME` for the packages with no Rust test at all (the Python package, whose
# tests are its pytest suite): `--lib` would otherwise build and run their libraries.
mapfile -t OTHER_TEST_FLAGS < <(
    cargo metadata --no-deps --format-version 1 --locked | python3 -c '
import json, sys
long_tests = set(sys.argv[1:])
packages = json.load(sys.stdin)["packages"]
tests = sorted({
    target["name"]
    for package in packages
    for target in package["targets"]
    if target["kind"] == ["test"] and target["name"] not in long_tests
})
for name in tests:
    print("--test")
    print(name)
for package in packages:
    if not any(target["test"] for target in package["targets"]):
        print("--exclude")
        print(package["name"])
' "${LONG_TESTS[@]}"
)
if [ "${#OTHER_TEST_FLAGS[@]}" = 0 ]; then
    echo "no test targets found in cargo metadata" >&2
    exit 1
fi
# One build of everything first: the runs below then only run (cargo does not hold its
# build lock while tests run, so they do not wait on each other).
cargo test --workspace --locked --no-run
status=0
# Runs `cargo test --workspace --test NAME` for each NAME at once, in the background,
# each one's output to target/test-NAME.log; `finish` waits for them and prints it.
pids=()
names=()
start() {
    for name in "$@"; do
        cargo test --workspace --locked --test "$name" >"target/test-$name.log" 2>&1 &
        pids+=("$!")
        names+=("$name")
    done
}
finish() {
    for i in "${!names[@]}"; do
        if ! wait "${pids[$i]}"; then
            status=1
            echo "FAILED: the ${names[$i]} tests (target/test-${names[$i]}.log)" >&2
        fi
        cat "target/test-${names[$i]}.log"
    done
    pids=()
    names=()
}
# LSEG's Java tools beside the other tests, which mostly wait on sockets and processes.
start rssl_interop
cargo test --workspace --locked --lib --bins "${OTHER_TEST_FLAGS[@]}" || status=1
cargo test --workspace --locked --doc || status=1
finish
# The lab's scenarios load the machine: they run beside each other, not beside the rest.
start lab lab_files
finish
exit "$status"
