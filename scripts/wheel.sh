#!/usr/bin/env bash
# Builds the tickwire Python package as a wheel into target/wheels/: one abi3 wheel
# (CPython 3.9 and every later version) for this platform, release-built and stripped,
# installable with pip where there is no Rust toolchain.
#
#   bash scripts/wheel.sh
#   pip install target/wheels/tickwire-*.whl
#
# `--version-specific`: a wheel for this python3's version alone (no stable ABI), which
# takes updates faster (docs/BENCHMARKS.md, "One Python subscriber").
#
# maturin (pinned here) is installed into a virtual environment of its own,
# target/wheel-tools, the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
FEATURES=()
case "${1:-}" in
    "") ;;
    --version-specific) FEATURES=(--no-default-features) ;;
    *) echo "usage: bash scripts/wheel.sh [--version-specific]" >&2; exit 2 ;;
esac
MATURIN_VERSION=1.16.0
TOOLS=target/wheel-tools
if [ "$("$TOOLS/bin/maturin" --version 2>/dev/null)" != "maturin $MATURIN_VERSION" ]; then
    rm -rf "$TOOLS"
    python3 -m venv "$TOOLS"
    "$TOOLS/bin/pip" install --quiet --disable-pip-version-check "maturin==$MATURIN_VERSION"
fi
rm -f target/wheels/tickwire-*.whl
"$TOOLS/bin/maturin" build --release --strip --locked \
    --manifest-path bindings/python/Cargo.toml \
    --interpreter python3 \
    "${FEATURES[@]}" \
    --out target/wheels
ls -l target/wheels/tickwire-*.whl
