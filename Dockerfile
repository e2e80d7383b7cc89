# syntax=docker/dockerfile:1
# copyrator's container image: a release build on Debian bookworm, run from distroless as
# non-root (uid 65532). The final image holds the binary, glibc and CA certificates only.

FROM rust:1.95-bookworm AS build
WORKDIR /app

# Dependencies first: this layer is rebuilt only when a manifest, Cargo.lock or the benchmark
# sources change (Cargo.toml names the benchmarks, so cargo needs their files to exist). The
# workspace's core crate gets a placeholder library so its dependencies build here too.
COPY Cargo.toml Cargo.lock ./
COPY crates/copyrator-core/Cargo.toml ./crates/copyrator-core/
COPY benches ./benches
RUN mkdir -p src crates/copyrator-core/src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs crates/copyrator-core/src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src crates/copyrator-core/src

# Then copyrator itself (touched so cargo rebuilds over the placeholder build).
COPY crates ./crates
COPY src ./src
RUN touch src/main.rs src/lib.rs crates/copyrator-core/src/lib.rs \
    && cargo build --release --locked

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /app/target/release/copyrator /usr/local/bin/copyrator
USER 65532:65532
# 8443: admission webhooks (TLS); 9090: /metrics, /healthz, /readyz.
EXPOSE 8443 9090
ENTRYPOINT ["/usr/local/bin/copyrator"]
CMD ["serve"]
