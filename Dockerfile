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
RUN cargo build --release --locked --bin tickwire \
 && strip target/release/tickwire

FROM debian:bookworm-slim AS run
# libuuid and libbsd: the embedded Aeron media driver needs them at run time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libuuid1 libbsd0 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home-dir /var/lib/tickwire --create-home --shell /usr/sbin/nologin tickwire \
 && mkdir -p /etc/tickwire
COPY --from=build /src/target/release/tickwire /usr/local/bin/tickwire
COPY deploy/docker/node.toml /etc/tickwire/node.toml
USER tickwire
WORKDIR /var/lib/tickwire
VOLUME ["/var/lib/tickwire"]
# 14002: publishers and subscribers; 15000: WebSocket API, dashboard, /metrics.
EXPOSE 14002 15000
ENTRYPOINT ["/usr/local/bin/tickwire"]
CMD ["node", "--config", "/etc/tickwire/node.toml", "--log-format", "json"]
