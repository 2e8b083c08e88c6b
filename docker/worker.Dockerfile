# The worker image: it runs the ERP job handlers, which carry the heavy dependencies (native
# modules, report and document tooling), so its final stage is Debian slim (glibc, what prebuilt
# native binaries target) rather than Alpine. The build stage bundles runtime/apps/worker-main.ts
# with esbuild; the final stage has the bundle and the migrations, runs as the unprivileged
# `node` user, and has no npm and no dev dependencies. ECS sends SIGTERM with the stop timeout
# lib/services/worker.ts sets (drain + release); initProcessEnabled forwards it to node.

FROM node:22-bookworm AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY types ./types
COPY scripts ./scripts
COPY runtime ./runtime
# The ERP's own migrations (README "Your tables"): bundled beside the platform's as app-migrations/.
COPY migrations ./migrations
# The jobs command's `local` subcommand (dev/): bundled like the rest, its packages left out.
COPY dev ./dev
COPY bin/jobs.ts ./bin/jobs.ts
RUN npx tsx scripts/bundle.ts worker && npx tsx scripts/bundle.ts cli

FROM node:22-bookworm-slim AS runtime
ENV NODE_ENV=production \
    NODE_OPTIONS=--enable-source-maps
# CA certificates for TLS to AWS APIs and RDS from native code; nothing else from apt.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && rm -rf /usr/local/lib/node_modules/npm /usr/local/bin/npm /usr/local/bin/npx /opt/yarn* /usr/local/bin/yarn /usr/local/bin/yarnpkg
WORKDIR /app
# The RDS CA bundle, to verify the database's certificate and host name (DATABASE_CA_FILE, set by
# the stack: lib/services/container-config.ts). Fetched when the image is built (cdk deploy).
ADD --chmod=644 https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem /etc/ssl/certs/rds-global-bundle.pem
COPY --from=build --chown=root:root /src/dist/worker/ ./
# The jobs command for operators' one-off tasks (docs/deploy.md#operator-access): `node jobs.mjs …`
# with the worker's task definition, settings and database secret. No local stack in an image.
COPY --from=build --chown=root:root /src/dist/cli/jobs.mjs /src/dist/cli/jobs.mjs.map ./
ENV JOBS_LOCAL_ENV=0
USER node
CMD ["node", "index.mjs"]
