# The API image: slim. The build stage bundles runtime/apps/api-main.ts with esbuild (every
# dependency inlined); the final stage is Node 22 on Alpine with the bundle and the migrations,
# running as the unprivileged `node` user. No npm, no node_modules, no dev dependencies.
# Built by `cdk deploy` (ContainerImage.fromAsset in lib/services/container-config.ts) with the
# repository as context; see .dockerignore.

FROM node:22-bookworm AS build
WORKDIR /src
COPY package.json package-lock.json ./
# Scripts off: the bundle needs no postinstall (esbuild ships its binary as a dependency).
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY types ./types
COPY scripts ./scripts
COPY runtime ./runtime
# The ERP's own migrations (README "Your tables"): bundled beside the platform's as app-migrations/.
COPY migrations ./migrations
RUN npx tsx scripts/bundle.ts api

FROM node:22-alpine AS runtime
ENV NODE_ENV=production \
    NODE_OPTIONS=--enable-source-maps \
    PORT=8080
WORKDIR /app
# The global image's npm and yarn are not needed at run time.
RUN rm -rf /usr/local/lib/node_modules/npm /usr/local/bin/npm /usr/local/bin/npx /opt/yarn* /usr/local/bin/yarn /usr/local/bin/yarnpkg
# The RDS CA bundle, to verify the database's certificate and host name (DATABASE_CA_FILE, set by
# the stack: lib/services/container-config.ts). Fetched when the image is built (cdk deploy).
ADD --chmod=644 https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem /etc/ssl/certs/rds-global-bundle.pem
COPY --from=build --chown=root:root /src/dist/api/ ./
USER node
EXPOSE 8080
CMD ["node", "index.mjs"]
