// Runs the reference harness in ../shared/bench/peers (pg-boss and graphile-worker) in the same
// benchmark run, on its PostgreSQL 15 (127.0.0.1:55432, durable settings), and leaves that
// server running so the platform is measured on the same PostgreSQL right after.
import { spawn } from 'node:child_process';
import { cp, mkdir } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';

export interface PeerRow {
  id: string;
  label: string;
  /** Process (drain) rate. */
  jobsPerSec: number;
  /** Enqueue + process together. */
  commitsPerJob: number;
  walBytesPerJob: number;
}

function sh(cmd: string, args: string[], cwd: string, log: (s: string) => void): Promise<string> {
  return new Promise((res, rej) => {
    const child = spawn(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => log(d.toString().trimEnd()));
    child.once('exit', (code) => (code === 0 ? res(out) : rej(new Error(`${cmd} ${args.join(' ')} exited with ${code}`))));
  });
}

export async function runPeers(opts: {
  runs: number;
  jobs: number;
  log: (s: string) => void;
}): Promise<{ rows: PeerRow[]; pgUrl: string; stopPg: () => Promise<void> }> {
  const src = resolve(import.meta.dirname, '../../shared/bench/peers');
  if (!existsSync(src)) throw new Error(`no reference harness at ${src} (../shared/bench/peers beside the repository)`);
  const dir = resolve(import.meta.dirname, '../.tmp/peers');
  await mkdir(dir, { recursive: true });
  await cp(src, dir, { recursive: true });
  if (!existsSync(join(dir, 'node_modules'))) {
    opts.log('peers: npm ci (pg-boss, graphile-worker)…');
    await sh('npm', ['ci', '--no-audit', '--no-fund'], dir, () => undefined);
  }
  opts.log('peers: running the reference harness (graphile-worker, pg-boss) at concurrency 10…');
  const out = await sh(
    'node',
    [
      'run.mjs',
      '--runs',
      String(opts.runs),
      '--jobs',
      String(opts.jobs),
      '--only',
      'graphile-tuned,pgboss-batch500,graphile-default,pgboss-single',
      '--concurrency',
      '10',
      '--keep-pg',
      '--no-node-baseline',
    ],
    dir,
    opts.log,
  );
  const measurements = out
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map(
      (l) =>
        JSON.parse(l) as {
          type: string;
          id: string;
          label: string;
          phase: string;
          rate: number;
          run: number;
          pg_cost?: { commits_per_job: number; wal_bytes_per_job: number };
        },
    )
    .filter((m) => m.type === 'measurement');
  const ids = [...new Set(measurements.map((m) => m.id))];
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
  const rows = ids.map((id) => {
    const ms = measurements.filter((m) => m.id === id);
    const runs = [...new Set(ms.map((m) => m.run))];
    const per = runs.map((run) => {
      const e = ms.find((m) => m.run === run && m.phase === 'enqueue');
      const p = ms.find((m) => m.run === run && m.phase === 'process');
      return {
        rate: p?.rate ?? 0,
        commits: (e?.pg_cost?.commits_per_job ?? 0) + (p?.pg_cost?.commits_per_job ?? 0),
        wal: (e?.pg_cost?.wal_bytes_per_job ?? 0) + (p?.pg_cost?.wal_bytes_per_job ?? 0),
      };
    });
    return {
      id,
      label: ms.find((m) => m.phase === 'process')?.label ?? id,
      jobsPerSec: med(per.map((x) => x.rate)),
      commitsPerJob: med(per.map((x) => x.commits)),
      walBytesPerJob: med(per.map((x) => x.wal)),
    };
  });
  return {
    rows,
    pgUrl: 'postgres://postgres@127.0.0.1:55432/postgres',
    stopPg: async () => {
      await sh('bash', ['pg.sh', 'stop'], dir, () => undefined);
    },
  };
}
