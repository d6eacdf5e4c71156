# coredns-mc: CoreDNS with the mcmirror plugin, and the mirror controller, in
# one image.
FROM golang:1.26-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends libcap2-bin && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/coredns-mc ./cmd/coredns-mc
# As upstream CoreDNS: a non-root process may bind port 53.
RUN setcap cap_net_bind_service=+ep /out/coredns-mc

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/coredns-mc /coredns-mc
EXPOSE 53 53/udp
USER nonroot:nonroot
ENTRYPOINT ["/coredns-mc"]
