#!/usr/bin/env bash
# Installs what building Tickwire needs on a fresh Debian machine, and nothing when it
# is already there (safe to run before every build):
# - clang and libclang-dev (bindgen), uuid-dev, libbsd-dev and pkg-config: the Aeron C
#   client and media driver, built from source by the rusteron crates and linked into
#   the node, need them to build, and libuuid and libbsd at run time;
# - iproute2: tests that forge or flood backbone datagrams do it in a network
#   namespace of their own, and bring its loopback up with `ip`;
# - cmake >= 3.30 for Aeron's build (Debian 12 ships 3.25): the PyPI wheel, in a virtual
#   environment of its own under target/tools; .cargo/config.toml points $CMAKE at it;
# - nats-server: the peer `tickwire bench peers` measures beside Tickwire (only the lab
#   runs it; without it that scenario says so and the rest of the lab runs);
# - uftp and rsync: the peers `tickwire bench files` measures beside Tickwire (the
#   one-to-many and the one-to-one file transfer; without them their rows say so);
# - e2fsprogs and mount (mkfs.ext4, losetup): the journal's failed-sync test makes a
#   small ext4 on a loop device (both are part of every Debian system; listed so).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in clang libclang-dev uuid-dev libbsd-dev pkg-config python3-venv nats-server iproute2 uftp rsync e2fsprogs mount; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    echo "setup: installing ${need[*]} (apt)" >&2
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

CMAKE_REQ="cmake==3.31.10"
if ! cmp -s <(echo "$CMAKE_REQ") target/tools/installed 2>/dev/null; then
    echo "setup: installing $CMAKE_REQ (PyPI) in target/tools" >&2
    rm -rf target/tools
    python3 -m venv target/tools
    target/tools/bin/pip install --quiet --disable-pip-version-check "$CMAKE_REQ"
    echo "$CMAKE_REQ" > target/tools/installed
fi
