# syntax=docker/dockerfile:1
# The volmig image: a static binary on a minimal, non-root base with no shell.
#
#   docker build -t <registry>/volmig:<version> .
#
# The build stage runs the same cargo command as `make release` (mk/helm.mk); on the Rust
# Alpine image the host target is musl, so the binary is statically linked.
# tests/helm_chart.rs checks the two stay in step.

FROM docker.io/library/rust:1.95-alpine AS build
# musl-dev: C runtime headers for ring's C/assembly parts.
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin volmig \
    && install -D -m 0755 target/release/volmig /out/volmig

# distroless static: CA certificates, /etc/passwd with the nonroot user, no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/volmig /usr/local/bin/volmig
# The nonroot user of distroless (matches runAsUser in the Helm chart).
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/volmig"]
CMD ["--help"]
