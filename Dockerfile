# syntax=docker/dockerfile:1
# Multi-stage build: compile in the Rust image, run in a slim Debian with only CA certificates,
# the OpenSSL runtime (josekit links libssl) and curl for the health check.

FROM rust:1.95-bookworm AS build
WORKDIR /src
RUN apt-get update && apt-get install -y --no-install-recommends pkg-config libssl-dev \
    && rm -rf /var/lib/apt/lists/*

# Dependencies first, in their own layer: built against stub sources (both workspace crates,
# the service and crates/cardgate-domain), so that a change to cardgate's own code does not
# rebuild the several hundred crates below it. Only a change to
# Cargo.toml or Cargo.lock invalidates this layer (or the gRPC .proto, whose generated code
# the build script writes; protoc itself comes from crates.io, so no system compiler).
COPY Cargo.toml Cargo.lock build.rs ./
COPY crates/cardgate-domain/Cargo.toml ./crates/cardgate-domain/
COPY .cargo ./.cargo
COPY proto ./proto
RUN mkdir -p src benches crates/cardgate-domain/src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs crates/cardgate-domain/src/lib.rs \
    && echo 'fn main() {}' > benches/cards.rs \
    && cargo build --profile dist --locked --bin cardgate \
    && rm -rf src benches crates/cardgate-domain/src

# Then cardgate itself. COPY keeps the files' own times, which may be older than the stub
# build's output: touching the crate roots makes cargo rebuild the crate, not reuse the stub.
COPY crates ./crates
COPY src ./src
COPY migrations ./migrations
COPY benches ./benches
# The dist profile keeps symbols (for `cargo bloat`); the image ships the binary without them.
RUN touch src/main.rs src/lib.rs crates/cardgate-domain/src/lib.rs \
    && cargo build --profile dist --locked --bin cardgate \
    && strip target/dist/cardgate

FROM debian:bookworm-slim AS runtime
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/cardgate --create-home cardgate \
    && mkdir -p /var/lib/cardgate/data \
    && chown cardgate:cardgate /var/lib/cardgate/data
COPY --from=build /src/target/dist/cardgate /usr/local/bin/cardgate
USER cardgate
WORKDIR /var/lib/cardgate
ENV CARDGATE_LISTEN=0.0.0.0:8080 \
    CARDGATE_LOG_FORMAT=json
# The SQLite default (./data/cardgate.db) and the signing key (./data/signing-key.pem) live
# here: keep it on a volume, or a new container starts with an empty registry and a new key.
VOLUME ["/var/lib/cardgate/data"]
EXPOSE 8080
# The port is whatever CARDGATE_LISTEN says, not a fixed 8080.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["sh", "-c", "curl -fsS \"http://127.0.0.1:${CARDGATE_LISTEN##*:}/readyz\" || exit 1"]
ENTRYPOINT ["cardgate"]
CMD ["serve"]
