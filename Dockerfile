# coredns-mc: CoreDNS with the mcmirror plugin, the mirror controller and the
# gateway in one image.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/coredns-mc ./cmd/coredns-mc

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/coredns-mc /coredns-mc
EXPOSE 53 53/udp
USER nonroot:nonroot
ENTRYPOINT ["/coredns-mc"]
