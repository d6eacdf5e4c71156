# coredns-mc: CoreDNS with the mcmirror plugin, and the mirror controller, in
# one image. Port 53 is bound through the pod's net.ipv4.ip_unprivileged_port_start
# sysctl, not a file capability: a binary with one cannot be executed once
# every capability is dropped (coredns/coredns#7435).
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse --short=12 HEAD) -t coredns-mc .
FROM golang:1.26-bookworm AS build
# Empty: Go's default proxy. make image sets it to off, the modules coming
# from the host's module cache.
ARG GOPROXY
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
	-o /out/coredns-mc ./cmd/coredns-mc

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/coredns-mc /coredns-mc
EXPOSE 53 53/udp
USER nonroot:nonroot
ENTRYPOINT ["/coredns-mc"]
