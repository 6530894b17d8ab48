# The taskport worker image, for users with Docker. `make image` builds the
# same image from Go with no daemon (deploy/image); this file must stay
# equivalent to it: same binary build flags, same files, same user, same
# entrypoint, same labels. deploy/image's TestDockerfileMatchesGoBuild
# parses this file and compares.
#
#   docker build --build-arg REVISION=$(git rev-parse HEAD) -t ghcr.io/taskport/taskport:dev .

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG REVISION=unknown
RUN CGO_ENABLED=0 GOFLAGS= go build -trimpath -buildvcs=false -ldflags="-s -w -buildid= -X main.version=${REVISION}" -o /out/taskport ./cmd/taskport

FROM scratch
ARG REVISION=unknown
COPY deploy/image/rootfs/etc/passwd /etc/passwd
COPY deploy/image/rootfs/etc/group /etc/group
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/taskport /usr/local/bin/taskport
LABEL org.opencontainers.image.source="https://github.com/taskport/taskport" \
      org.opencontainers.image.revision="${REVISION}"
USER 65532:65532
WORKDIR /
ENTRYPOINT ["/usr/local/bin/taskport"]
