// The jobs command's output through a pipe, as a person pipes it into jq or a file: a large
// output must arrive whole. Node writes to a pipe asynchronously, so a process.exit() right after
// a big write used to cut `jobs list --json` at the pipe's 64 KB buffer, leaving invalid JSON.
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../support/db.ts';

const JOBS = 1000;
const NOTE = 'x'.repeat(2000);
let db: TestDb;
beforeAll(async () => {
  db = await createTestDb();
  // Rows straight into the table: the list reads them back, no enqueue path or queue needed.
  await db.pool.query(
    `INSERT INTO jobs.job (type, payload)
     SELECT 'ledger.post', jsonb_build_object('batch', 'PIPE-' || g, 'entries', 1, 'note', $1::text) FROM generate_series(1, $2::int) g`,
    [NOTE, JOBS],
  );
});
afterAll(() => db.drop());

/** Run `jobs ARGS | (sleep 1; dd)` in bash: a real pipe whose reader starts late; pipefail gives the jobs command's exit code. */
function throughSlowPipe(
  args: string[],
  reader = '(sleep 1; dd bs=4096 2>/dev/null)',
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const cmd = `"${process.execPath}" --import tsx bin/jobs.ts ${args.join(' ')} | ${reader}`;
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-o', 'pipefail', '-c', cmd], {
      env: { ...process.env, DATABASE_URL: db.url, JOBS_LOCAL_ENV: '0', JOBS_QUEUE_URL: '' },
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    child.on('error', reject);
    child.on('close', (code) =>
      resolve({ code, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') }),
    );
  });
}

describe('jobs output through a pipe', () => {
  it('list --json of 1,000 jobs (over 2 MB) arrives whole into a slow reader and parses', async () => {
    const r = await throughSlowPipe(['list', '--json', '--limit', String(JOBS)]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout.length).toBeGreaterThan(2_000_000);
    const jobs = JSON.parse(r.stdout) as { payload: { batch: string; note: string } }[];
    expect(jobs).toHaveLength(JOBS);
    expect(new Set(jobs.map((j) => j.payload.batch)).size).toBe(JOBS);
    expect(jobs.every((j) => j.payload.note === NOTE)).toBe(true);
  }, 60_000);

  it('a reader that stops early (head): the command finishes quietly, no EPIPE trace, exit 0', async () => {
    const r = await throughSlowPipe(['list', '--json', '--limit', String(JOBS)], 'head -c 100');
    expect(r.stdout).toHaveLength(100);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
  }, 60_000);

  it('keeps the exit code and the message of a usage error', async () => {
    const r = await throughSlowPipe(['list', '--state', 'done']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--state must be one of/);
  }, 60_000);
});
