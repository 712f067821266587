# One image for the control plane, the sidecar and the sample Tool Services (see docker-compose.yml).
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY control-plane control-plane
COPY samples samples
COPY proto proto
COPY envoy envoy
COPY registry registry
COPY test test
RUN npx tsc -p tsconfig.json && npm prune --omit=dev

FROM node:24-bookworm-slim
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules node_modules
COPY --from=build /app/dist dist
COPY --from=build /app/proto proto
# The call script Envoy runs (the control plane sends it in the listener's Lua filter).
COPY --from=build /app/control-plane/xds/lua control-plane/xds/lua
# The operator dashboard's page, script and style (the control plane serves them at /dashboard).
COPY --from=build /app/control-plane/admin/dashboard control-plane/admin/dashboard
COPY --from=build /app/envoy envoy
COPY --from=build /app/registry registry
USER node
ENTRYPOINT ["node", "dist/control-plane/cli/mcpgw.js"]
