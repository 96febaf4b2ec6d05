# syntax=docker/dockerfile:1
# Build: make docker-build IMG=registry.example.com/proxy-operator:tag
# Stage 1 builds a static binary; stage 2 is distroless static, running as the nonroot user
# (65532), which is what metacontroller/install/deployment.yaml's securityContext expects.
FROM golang:1.27.3 AS build
WORKDIR /src
# Modules first, so a source-only change reuses the download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/proxy-operator .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/proxy-operator /proxy-operator
USER 65532:65532
EXPOSE 8080 8090
ENTRYPOINT ["/proxy-operator"]
