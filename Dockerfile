# syntax=docker/dockerfile:1
# Multi-stage build: compile in the Rust image, run in a slim Debian with only CA certificates
# and the OpenSSL runtime (josekit links libssl).

FROM rust:1.95-bookworm AS build
WORKDIR /src
RUN apt-get update && apt-get install -y --no-install-recommends pkg-config libssl-dev \
    && rm -rf /var/lib/apt/lists/*
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY migrations ./migrations
COPY examples ./examples
COPY benches ./benches
RUN cargo build --release --locked --bin cardgate

FROM debian:bookworm-slim AS runtime
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/cardgate --create-home cardgate
COPY --from=build /src/target/release/cardgate /usr/local/bin/cardgate
USER cardgate
WORKDIR /var/lib/cardgate
ENV CARDGATE_LISTEN=0.0.0.0:8080 \
    CARDGATE_LOG_FORMAT=json
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/readyz || exit 1
ENTRYPOINT ["cardgate"]
CMD ["serve"]
