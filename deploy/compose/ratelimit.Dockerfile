# The ratelimit service of shared limits for docker-compose.yml: the official envoyproxy/ratelimit binary
# (static), on a base with a shell. The official image (distroless) has none, and the service reads its
# Redis password only from REDIS_AUTH, while the compose stack keeps the password in a file of the
# `inside` volume (never in the compose file or on a command line). The Helm chart runs the official
# image itself, its REDIS_AUTH from a Secret. The tag is the commit test/tools/ratelimit/go.mod pins
# (upstream tags images by the first 8 hex digits of the commit): the service the tests run.
FROM envoyproxy/ratelimit:3fb70258 AS service

FROM busybox:1.37.0-musl
COPY --from=service /bin/ratelimit /bin/ratelimit
# Envoy's uid in the compose stack: the socket the service creates is its owner's, and Envoy connects to it.
USER 1000:1000
ENTRYPOINT ["/bin/sh", "-c", "REDIS_AUTH=\"mcpgw:$(cat \"$REDIS_PASSWORD_FILE\")\" exec /bin/ratelimit"]
