# syntax=docker/dockerfile:1
#
# The pav image: one static `pav` binary at /usr/local/bin/pav, nothing else.
# It runs `pav controller`, `pav csi-controller` and `pav csi-node`
# (deploy/pav.yaml and the drivers the controller deploys call it by that
# path).
#
#   docker build -t pav:dev .
#
# Without a container engine, build the same binary on the host and import
# a rootfs holding only it (see docs/install.md).

# Pinned by digest, so a rebuild uses the same toolchain and Alpine
# whatever the tag points at later; the tag stays for readers. This CI
# cannot pull images, so the digest is the image index that public
# Dockerfiles pin for this tag, not one pulled here: a build that cannot
# resolve it fails at this line. Move tag and digest together.
FROM rust:1.95-alpine@sha256:606fd313a0f49743ee2a7bd49a0914bab7deedb12791f3a846a34a4711db7ed2 AS build
# gcc and musl-dev: ring's C and assembly parts; everything else is Rust.
RUN apk add --no-cache gcc musl-dev
WORKDIR /src
COPY . .
# On Alpine the host target is x86_64-unknown-linux-musl, which links
# statically by default.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p pav \
    && cp target/release/pav /pav \
    && strip /pav

FROM scratch
# OCI annotations registries and scanners read; the version is the
# workspace's (docker build --build-arg VERSION=...).
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="pav" \
      org.opencontainers.image.description="Pods-as-Volumes: Kubernetes volume provisioners whose steps are pods, served as CSI drivers" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/pav-sdk/pav"
COPY --from=build /pav /usr/local/bin/pav
# Not root by default: the controller, every driver's CSI controller and
# the chart's uninstall check need no root (they also set runAsUser 65532
# themselves). Only the node plugin, which mounts into the node, runs as
# root: its DaemonSet says runAsUser 0 (pav/src/manifests/driver.rs).
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/pav"]
