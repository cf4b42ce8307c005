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

With `--clippy`, the same build is also `cargo clippy --workspace --all-targets --
-D warnings`: the workspace's crates are compiled by clippy-driver, the program
`cargo clippy` runs in place of rustc, which reads its lint options from CLIPPY_ARGS
as `cargo clippy` passes them. Its lints are errors, and the dependencies are built
once rather than once for clippy and once for the tests. Packages with no Rust test
(the Python package) are linted by `cargo clippy -p` instead.

    python3 scripts/cargo-tests.py [--clippy]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
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


def clippy_env():
    """The environment in which cargo compiles the workspace's crates with clippy-driver,
    clippy's lints as errors; checked first on a crate clippy must refuse, so that the
    gate cannot pass by doing nothing."""
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], check=True,
                             stdout=subprocess.PIPE, text=True).stdout.strip()
    driver = str(Path(sysroot) / "bin" / "clippy-driver")
    env = dict(os.environ, RUSTC_WORKSPACE_WRAPPER=driver, CLIPPY_ARGS="-Dwarnings")
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.rs"
        probe.write_text("pub fn copied() -> u32 {\n    let x = 5u32;\n    x.clone()\n}\n")
        refused = subprocess.run(
            [driver, "rustc", "--crate-type", "lib", "--edition", "2021",
             "--out-dir", tmp, str(probe)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
    if refused.returncode == 0 or "clone_on_copy" not in refused.stderr:
        sys.exit(f"{driver} with CLIPPY_ARGS=-Dwarnings did not refuse clone_on_copy:\n"
                 f"{refused.stderr}")
    return env


def packages_without_tests():
    """Packages none of whose targets is a Rust test (the Python package)."""
    metadata = json.loads(subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--locked"],
        cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout)
    return [p["name"] for p in metadata["packages"]
            if not any(t["test"] for t in p["targets"])]


def test_binaries(packages, env, all_targets):
    """Builds every test binary (with `all_targets`, the benchmarks too); returns the
    test binaries in cargo's order (by package, then target)."""
    command = ["cargo", "test", *packages, "--locked", "--no-run",
               "--message-format=json-render-diagnostics"]
    if all_targets:
        command.append("--all-targets")
    build = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    if build.returncode != 0:
        sys.exit(build.returncode)
    binaries = []
    for line in build.stdout.splitlines():
        msg = json.loads(line)
        # Benchmarks built by `--all-targets` are linted, not run (as by `cargo test`).
        if (msg.get("reason") == "compiler-artifact" and msg.get("executable")
                and msg["profile"]["test"] and msg["target"]["kind"] != ["bench"]):
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clippy", action="store_true",
                        help="lint the build as `cargo clippy --workspace --all-targets "
                             "-- -D warnings` does")
    args = parser.parse_args()
    failed = []
    # What every cargo command below selects, in which environment: the doc tests
    # must resolve features as the build did, or cargo would rebuild.
    packages, env = ["--workspace"], None
    if args.clippy:
        env = clippy_env()
        for package in packages_without_tests():
            say(f"cargo clippy -p {package}")
            linted = subprocess.run(["cargo", "clippy", "-p", package, "--all-targets",
                                     "--locked", "--", "-D", "warnings"], cwd=ROOT)
            if linted.returncode != 0:
                sys.exit(f"FAILED: cargo clippy -p {package}")
            packages += ["--exclude", package]
    say("building" + (", linted by clippy" if args.clippy else ""))
    binaries = test_binaries(packages, env, all_targets=args.clippy)
    say(f"{', '.join(BESIDE_THE_REST)} beside the other tests")
    background = [run_in_background(b) for b in binaries if b.name in BESIDE_THE_REST]
    for b in binaries:
        if b.name in BESIDE_THE_REST or b.name in LAB:
            continue
        print(f"     Running {b.name} ({b.executable})", flush=True)
        if subprocess.run([b.executable], cwd=b.package_dir).returncode != 0:
            # Several packages have a binary of the same name (fuzz_corpus).
            failed.append(f"{b.name} of {Path(b.package_dir).name}")
    if subprocess.run(["cargo", "test", *packages, "--locked", "--doc"],
                      cwd=ROOT, env=env).returncode != 0:
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
