# syntax=docker/dockerfile:1
# kmeta controller image.
#
# No Docker engine runs on the project's build machines, so this file is kept simple and is checked
# by reading, not by building. Build with:  docker build -t ghcr.io/kmeta/kmeta:dev .

# --- build stage -------------------------------------------------------------------------------
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# No layer of its own caches the dependencies (the whole tree is copied at once): BuildKit cache
# mounts keep the crates.io downloads and the compiled dependencies in `target/` between builds
# instead, so a source-only change recompiles kmeta's own crates, not its dependencies. The binary
# is copied out in the same step, as the cache mount is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p kmeta --bin kmeta \
 && cp target/release/kmeta /kmeta

# --- runtime stage -----------------------------------------------------------------------------
# distroless/cc carries glibc and CA certificates (kmeta's TLS uses rustls with the system roots);
# the :nonroot tag runs as uid/gid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /kmeta /usr/bin/kmeta
USER 65532:65532
EXPOSE 9999 8081
ENTRYPOINT ["/usr/bin/kmeta"]
CMD ["run"]
