# syntax=docker/dockerfile:1
# Tickwire node image: built in a Rust image with the project's own set-up script, run
# from a small Debian image as an unprivileged user.
#
#   docker build -t tickwire .
#   docker run --rm -p 14002:14002 -p 15000:15000 -v tickwire-data:/var/lib/tickwire tickwire
#
# docs/OPERATIONS.md, "Packaging", says what the image holds and how to configure it.

FROM rust:1-bookworm AS build
WORKDIR /src
# The set-up script installs the build's system packages and cmake >= 3.30 (PyPI).
COPY scripts/ scripts/
RUN bash scripts/setup.sh
COPY . .
# Cargo's registry and target/ are BuildKit cache mounts: a rebuild after a change
# compiles only what changed (a first build takes minutes; Aeron's C driver included).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin tickwire \
 && strip -o /usr/local/bin/tickwire target/release/tickwire

FROM debian:bookworm-slim AS run
# libuuid and libbsd: the embedded Aeron media driver needs them at run time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libuuid1 libbsd0 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home-dir /var/lib/tickwire --create-home --shell /usr/sbin/nologin tickwire \
 && mkdir -p /etc/tickwire
COPY --from=build /usr/local/bin/tickwire /usr/local/bin/tickwire
COPY deploy/docker/node.toml /etc/tickwire/node.toml
USER tickwire
WORKDIR /var/lib/tickwire
VOLUME ["/var/lib/tickwire"]
# 14002: publishers and subscribers; 15000: WebSocket API, dashboard, /metrics.
EXPOSE 14002 15000
# Alive: the node's event loop answers GET /healthz on its HTTP port (the address is
# read from the configuration; the image has no curl). Readiness (/readyz: backbone,
# upstream, journal) is for orchestrators' probes: a node waiting for its upstream is
# not broken.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/tickwire", "health", "--config", "/etc/tickwire/node.toml"]
ENTRYPOINT ["/usr/local/bin/tickwire"]
CMD ["node", "--config", "/etc/tickwire/node.toml", "--log-format", "json"]
