// On-call tools end to end, on the local stack with real processes (embedded PostgreSQL, the local
// SQS endpoint, the API process, two worker processes): every `jobs` on-call command as a separate
// process, every on-call API route, and every `npx tsx bin/jobs.ts` / `curl` command of
// docs/runbooks/README.md as written (placeholders filled in with real ids).
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalStack, type LocalStack } from '../../dev/stack.ts';
import { SqsQueue } from '../../runtime/queue/sqs.ts';
import { jobsBundle, removeJobsBundle, type Run, runJobs } from '../support/cli.ts';
import { waitFor } from '../support/platform.ts';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const RUNBOOK = join(REPO, 'docs/runbooks/README.md');

let stack: LocalStack;
let db: pg.Pool;
let queue: SqsQueue;

beforeAll(async () => {
  const bundled = jobsBundle();
  stack = await startLocalStack({
    workers: 2,
    dir: await mkdtemp(join(tmpdir(), 'jobs-oncall-')),
    timings: {
      leaseSeconds: 3,
      heartbeatSeconds: 1,
      visibilityTimeoutSeconds: 4,
      maxAttempts: 2,
      backoffBaseSeconds: 0.3,
      backoffMaxSeconds: 0.5,
      drainSeconds: 1,
    },
    log: () => undefined,
    // No bearer tokens, whatever the shell running the tests has: the local stack's API is open.
    env: { LOG_LEVEL: 'fatal', JOBS_STUCK_RUNNING_SECONDS: '2', JOBS_STUCK_CHECK_SECONDS: '1', API_TOKEN: '', API_OPERATOR_TOKEN: '' },
  });
  db = new pg.Pool({ connectionString: stack.env.DATABASE_URL, max: 2 });
  queue = new SqsQueue({ queueUrl: stack.env.JOBS_QUEUE_URL!, endpoint: stack.env.JOBS_SQS_ENDPOINT! });
  await bundled;
}, 90_000);

afterAll(async () => {
  await db?.end();
  await stack?.stop();
  await removeJobsBundle();
}, 60_000);

// --- helpers ----------------------------------------------------------------------------------

/** The environment a person next to `jobs local` has: the stack's settings, nothing from a stray .jobs-local. */
const cliEnv = () => ({ ...process.env, ...stack.env, JOBS_LOCAL_ENV: '0', API_TOKEN: '', USER: 'tester' });

function sh(command: string, env: NodeJS.ProcessEnv = cliEnv()): Promise<Run> {
  return new Promise((resolve) => {
    execFile('sh', ['-c', command], { cwd: REPO, env, timeout: 60_000, maxBuffer: 10 * 1024 * 1024 }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

/** `jobs ARGS…` as a separate process (the bundled command: test/support/cli.ts). */
const jobs = (args: string[]): Promise<Run> => runJobs(args, { env: cliEnv(), cwd: REPO });

const api = async (method: string, path: string, body?: unknown) => {
  const res = await fetch(`${stack.apiUrl}${path}`, {
    method,
    ...(body !== undefined ? { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } } : {}),
  });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as Record<string, any>) : undefined };
};

const enqueue = async (payload: Record<string, unknown>, extra: Record<string, unknown> = {}) => {
  const r = await api('POST', '/v1/jobs', { type: 'ledger.post', payload, ...extra });
  expect(r.status).toBe(201);
  return r.body!.id as string;
};

const until = (id: string, state: string, ms = 20_000) =>
  waitFor(
    async () => {
      const r = await api('GET', `/v1/jobs/${id}`);
      return r.body?.state === state ? r.body : null;
    },
    ms,
    `job ${id} ${state}`,
  );

let seq = 0;
/** A job that dies on its first attempt (attempt cap 1), with its dead letter in the DLQ. */
async function deadJob(): Promise<string> {
  const id = await enqueue({ batch: `DEAD-${++seq}`, entries: 2, failAttempts: 9 }, { maxAttempts: 1 });
  await until(id, 'dead');
  return id;
}
/** A job that fails once, dies (cap 1), and succeeds after a redrive (attempt 2 > failAttempts 1). */
async function fixableDeadJob(): Promise<string> {
  const id = await enqueue({ batch: `FIX-${++seq}`, entries: 3, failAttempts: 1 }, { maxAttempts: 1 });
  await until(id, 'dead');
  return id;
}
async function succeededJob(): Promise<string> {
  const id = await enqueue({ batch: `OK-${++seq}`, entries: 1 });
  await until(id, 'succeeded');
  return id;
}
async function runningJob(workMs = 20_000): Promise<string> {
  const id = await enqueue({ batch: `RUN-${++seq}`, entries: 1, workMs });
  await until(id, 'running');
  return id;
}
/** Put a poison body on the job queue; a worker dead-letters it. Returns its DLQ message id. */
async function poisonMessage(body: string): Promise<string> {
  await queue.send([{ body }]);
  const found = await waitFor(
    async () => {
      const r = await jobs(['dlq', 'list', '--poison', '--json']);
      const l = (JSON.parse(r.stdout).letters as { messageId: string; body: string }[]).find((x) => x.body === body);
      return l ?? null;
    },
    20_000,
    `poison ${body} in the DLQ`,
  );
  return found.messageId;
}
const ledgerRows = async (batch: string) =>
  (await db.query('SELECT count(*)::int AS n FROM ledger_entries WHERE batch = $1', [batch])).rows[0].n as number;

// --- CLI ----------------------------------------------------------------------------------------

describe('jobs show --watch', () => {
  it('draws progress, the attempt, the lease owner and the time left until the job succeeds, then exits 0', async () => {
    const id = await enqueue({ batch: 'WATCH-1', entries: 2, workMs: 4000 });
    const r = await jobs(['show', id, '--watch', '--interval', '0.2']);
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n');
    // Piped: one line per visible change, with a bar, a percentage, the attempt and the lease.
    // Progress reaches the database with each heartbeat (1 s here), so 4 s of work shows a few.
    const runningLines = lines.filter((l) => / running · attempt 1 \(1 of \d+ used\) · lease local-worker-\d [\d.]+ s left/.test(l));
    expect(runningLines.length, r.stdout).toBeGreaterThanOrEqual(2);
    expect(
      runningLines.some((l) => /\[#{2,}-*\]\s+\d+%/.test(l) && /working \(\d+\/4000 ms\)/.test(l)),
      r.stdout,
    ).toBe(true);
    const fractions = runningLines.map((l) => Number(/\]\s+(\d+)%/.exec(l)![1]));
    expect(fractions).toEqual([...fractions].sort((a, b) => a - b));
    expect(lines.at(-1)).toMatch(/^succeeded after .* on attempt 1 \(1 of \d+ used\): \{"batch":"WATCH-1","posted":2\}$/);
  }, 60_000);

  it('exits 1 with the reason when the watched job ends dead, and for an unknown job', async () => {
    const id = await enqueue({ batch: 'WATCH-DEAD', entries: 1, failAttempts: 9 }, { maxAttempts: 1 });
    const r = await jobs(['show', id, '--watch', '--interval', '0.2']);
    expect(r.code).toBe(1);
    expect(r.stdout.trim().split('\n').at(-1)).toMatch(
      new RegExp(`^dead after .*: Error: simulated failure of batch WATCH-DEAD on attempt 1 .*see \`jobs dead show ${id}\``),
    );
    const unknown = await jobs(['show', '00000000-0000-4000-8000-000000000000', '--watch']);
    expect(unknown.code).toBe(1);
    expect((await jobs(['show', id, '--watch', '--interval', '0'])).code).toBe(2);
  }, 60_000);
});

describe('jobs dead', () => {
  it('list, show, redrive (runs again and succeeds, effects once), refuses a succeeded job, discard', async () => {
    const fixable = await fixableDeadJob();
    const doomed = await deadJob();
    const done = await succeededJob();

    const list = await jobs(['dead', 'list', '--since', '10m', '--type', 'ledger.post']);
    expect(list.code).toBe(0);
    // Its lane: the urgent DLQ's runbook step tells urgent dead jobs from bulk ones by it.
    expect(list.stdout).toMatch(
      new RegExp(`${fixable}  ledger.post +bulk +\\S+ +1/1  local-worker-\\d +Error: simulated failure of batch FIX-`),
    );
    expect(list.stdout).toContain(doomed);
    expect(list.stdout).not.toContain(done);

    const show = await jobs(['dead', 'show', fixable]);
    expect(show.code).toBe(0);
    expect(show.stdout).toMatch(/state +dead/);
    expect(show.stdout).toMatch(/attempt 1 dead at .* by local-worker-\d: simulated failure/);
    expect(show.stdout).toMatch(/dead since .*: Error: simulated failure[\s\S]*1 of 1 attempts used; last owner local-worker-\d/);
    expect(show.stdout).toContain(`npx tsx bin/jobs.ts dead redrive ${fixable}`);

    const refused = await jobs(['dead', 'redrive', done, '--by', 'oncall']);
    expect(refused.code).toBe(1);
    expect(refused.stdout).toMatch(
      new RegExp(`skipped ${done} \\(ledger.post\\): job succeeded at .*: redrive never touches a succeeded job`),
    );
    expect((await api('GET', `/v1/jobs/${done}`)).body).toMatchObject({ state: 'succeeded', attempt: 1 });

    const redrive = await jobs(['dead', 'redrive', fixable, '--reason', 'ERP endpoint fixed', '--by', 'oncall']);
    expect(redrive.code).toBe(0);
    expect(redrive.stdout).toMatch(/redriven by oncall \(cli\): 1 job\(s\) back to pending with a fresh attempt budget, re-published/);
    const after = await until(fixable, 'succeeded');
    expect(after.attempt).toBe(2);
    expect(await ledgerRows(after.result.batch)).toBe(3);
    const shown = await jobs(['dead', 'show', fixable]);
    expect(shown.stdout).toMatch(/attempt 1 redriven at .* by oncall \(cli\): ERP endpoint fixed/);
    expect(shown.stdout).toMatch(/job-redrive by oncall \(cli\): ERP endpoint fixed/);

    expect((await jobs(['dead', 'discard', doomed])).code).toBe(2);
    const discard = await jobs(['dead', 'discard', doomed, '--reason', 'batch withdrawn by finance', '--by', 'oncall']);
    expect(discard.code).toBe(0);
    // Run twice (a runbook step repeated): the state asked for holds, so it exits 0 and says so.
    const again = await jobs(['dead', 'discard', doomed, '--reason', 'batch withdrawn by finance', '--by', 'oncall']);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(new RegExp(`skipped ${doomed} \\(ledger\\.post\\): job was already discarded by oncall \\(cli\\)`));
    expect((await jobs(['dead', 'list', '--since', '10m'])).stdout).not.toContain(doomed);
    expect((await jobs(['dead', 'list', '--since', '10m', '--discarded'])).stdout).toMatch(
      new RegExp(`${doomed}.*\\[discarded by oncall \\(cli\\): batch withdrawn by finance\\]`),
    );
  }, 120_000);

  it.each([
    [
      ['dead', 'redrive', '--by', 'x'],
      /^jobs: jobs dead redrive needs job ids, a type, a lane, a time range \(--type T, --lane L, --since T, --until T\) or --all/,
    ],
    [['dead', 'discard', '--reason', 'x'], /^jobs: jobs dead discard needs job ids, a type, a lane, a time range/],
    [
      ['dead', 'redrive', '01900000-0000-7000-8000-000000000001', '--all'],
      /^jobs: jobs dead redrive: name job ids or --type\/--lane\/--since\/--until\/--all, not both/,
    ],
    [['dead', 'list', '--lane', 'fast'], /^jobs: --lane must be one of urgent, bulk \(got fast\)/],
    [['dead', 'list', '--since', 'yesterday'], /--since must be an ISO 8601 time with an offset .* or an age/],
    [['dead', 'redrive', 'not-an-id'], /not-an-id is not a job id/],
    [['dead', 'redrive', '--all', '--max-attempts', '0'], /--max-attempts must be a whole number from 1 to 100/],
    [['dead', 'frob'], /unknown subcommand frob/],
    [['dlq', 'discard', 'm-1'], /--reason is required/],
    [['dlq', 'move-cancel'], /jobs dlq move-cancel TASK_HANDLE: name one move task handle \(see jobs dlq move-status\)/],
    [['poison', 'list', '--reason', 'weird'], /--reason must be unparseable-body or unknown-job/],
  ])('refuses %j with exit 2 and the reason', async (args, message) => {
    const r = await jobs(args as string[]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
  });
});

describe('jobs dlq and jobs poison', () => {
  it('lists dead letters with verdicts, redrives (resending only what has a job to run), discards poison with a reason', async () => {
    const fixable = await fixableDeadJob();
    const doomed = await deadJob();
    const xml = `<invoice no="${Date.now()}"/>`;
    const poisonId = await poisonMessage(xml);

    const poison = await jobs(['poison', 'list']);
    expect(poison.code).toBe(0);
    expect(poison.stdout).toMatch(/unparseable-body {2}message \S+ {2}worker local-worker-\d {2}received 1x/);
    expect(poison.stdout).toContain(JSON.stringify(xml));

    const look = await jobs(['dlq', 'list']);
    expect(look.code).toBe(0);
    expect(look.stdout).toMatch(new RegExp(`attempts-exhausted +job ${fixable} \\(ledger.post\\) dead\\n +keep: job is dead`));
    expect(look.stdout).toMatch(/unparseable-body +no job\n +keep: poison: the body names no job/);
    // The worker made the copy: its role is not the original's sender (on-call drill: read as the culprit).
    const sourceId = /unparseable-body {2}message (\S+)/.exec(poison.stdout)![1]!;
    expect(look.stdout).toContain(`copied to the DLQ by: `);
    expect(look.stdout).toContain(`(the worker; the original message ${sourceId} and its attributes: jobs poison list)`);

    // Redrive the fixable job, then the DLQ: its letter is now resent, the doomed one and the poison kept.
    expect((await jobs(['dead', 'redrive', fixable, '--by', 'oncall'])).code).toBe(0);
    const redrive = await jobs(['dlq', 'redrive', '--by', 'oncall']);
    expect(redrive.code).toBe(0);
    // What it did, not what a dry run would plan.
    expect(redrive.stdout).toMatch(/^\d+ dead letter\(s\): \d+ resent, \d+ deleted as obsolete, \d+ kept$/m);
    expect(redrive.stdout).toMatch(new RegExp(`job ${doomed} \\(ledger.post\\) dead\\n +kept: job is dead`));
    expect(redrive.stdout).toMatch(new RegExp(`${poisonId} .*\\n +kept: poison`));
    expect(redrive.stdout).toMatch(new RegExp(`job ${fixable} \\(ledger.post\\) (pending|running|succeeded)\\n +(resent|dropped): `));
    await until(fixable, 'succeeded');

    const move = await jobs(['dlq', 'redrive', '--move', '--dry-run', '--by', 'oncall']);
    expect(move.code).toBe(0);
    expect(move.stdout).toMatch(/^note: the local SQS endpoint has no StartMessageMoveTask: moved by receive and resend instead/);
    expect((await jobs(['dlq', 'move-status'])).stdout).toMatch(/local SQS endpoint has no message move tasks/);
    const cancel = await jobs(['dlq', 'move-cancel', 'task-handle-1', '--by', 'oncall']);
    expect(cancel.code).toBe(1);
    expect(cancel.stderr).toMatch(
      /^not cancelled: cannot cancel move task task-handle-1: the local SQS endpoint has no message move tasks/,
    );

    const discard = await jobs(['dlq', 'discard', poisonId, '--reason', 'old EDI bridge, switched off', '--by', 'oncall']);
    expect(discard.code).toBe(0);
    expect(discard.stdout).toMatch(/discarded by oncall \(cli\): 1 dead letter\(s\) \(old EDI bridge, switched off\)/);
    expect((await jobs(['dlq', 'list', '--poison'])).stdout).not.toContain(poisonId);
    expect((await jobs(['poison', 'list'])).stdout).not.toContain(JSON.stringify(xml));
    expect((await jobs(['poison', 'list', '--resolved'])).stdout).toMatch(
      /resolved by oncall \(cli\) at .*: dead letter discarded: old EDI bridge, switched off/,
    );
    const missing = await jobs(['dlq', 'discard', poisonId, '--reason', 'again']);
    expect(missing.code).toBe(1);
    expect(missing.stdout).toContain(`not found in the DLQ: ${poisonId}`);
  }, 120_000);
});

describe('jobs stuck and cancel', () => {
  it('lists a job running past its limit with its lease and progress; cancel aborts the handler at its next heartbeat, recording who asked', async () => {
    const id = await runningJob(30_000);
    const stuck = await waitFor(
      async () => {
        const r = await jobs(['stuck', '--running-seconds', '2']);
        return r.stdout.includes(id) ? r : null;
      },
      15_000,
      'job listed as stuck',
    );
    expect(stuck.stdout).toMatch(
      new RegExp(
        `${id}  ledger.post +running-too-long  running attempt 1 for \\d+ s, over the default limit of 2 s\\n +lease local-worker-\\d · progress \\d+% working`,
      ),
    );
    const viaApi = await api('GET', '/v1/stuck-jobs');
    expect(viaApi.body!.thresholds).toEqual({ runningSeconds: 2, pendingSeconds: 900 });
    expect(viaApi.body!.stuckJobs.find((s: { id: string }) => s.id === id)).toMatchObject({
      reason: 'running-too-long',
      limitSeconds: 2,
      leaseOwner: expect.stringMatching(/^local-worker-\d$/),
    });

    const cancel = await jobs(['cancel', id, '--by', 'oncall']);
    expect(cancel.code).toBe(0);
    const job = await until(id, 'cancelled');
    expect(job.cancelledBy).toBe('oncall (cli)');
    // The handler stopped: its lease is not renewed, it never completes, and it posted nothing.
    await new Promise((r) => setTimeout(r, 2500));
    const row = (await db.query('SELECT state, lease_owner, result FROM jobs.job WHERE id = $1', [id])).rows[0];
    expect(row).toMatchObject({ state: 'cancelled', lease_owner: null, result: null });
    expect(await ledgerRows(job.payload.batch)).toBe(0);
    expect((await jobs(['stuck', '--running-seconds', '2'])).stdout).not.toContain(id);
  }, 60_000);
});

// --- API ----------------------------------------------------------------------------------------

describe('on-call API routes on the local stack', () => {
  it('dead jobs: list, show, redrive (409 for a succeeded job), discard, filtered dry run', async () => {
    const a = await fixableDeadJob();
    const b = await deadJob();
    const ok = await succeededJob();
    const list = await api(
      'GET',
      `/v1/dead-jobs?type=ledger.post&since=${encodeURIComponent(new Date(Date.now() - 600_000).toISOString())}&limit=200`,
    );
    expect(list.status).toBe(200);
    expect(list.body!.deadJobs.find((j: { id: string }) => j.id === a)).toMatchObject({
      state: 'dead',
      attemptsUsed: 1,
      lastOwner: expect.stringMatching(/^local-worker-/),
      lastError: { message: expect.stringMatching(/simulated failure/) },
    });
    const show = await api('GET', `/v1/dead-jobs/${a}`);
    expect(show.body!.job.attemptLog).toMatchObject([{ outcome: 'dead', attempt: 1 }]);
    expect(show.body!.job.attemptLog[0].stack).toBeUndefined();

    const refused = await api('POST', `/v1/dead-jobs/${ok}/redrive`, { by: 'pat' });
    expect(refused.status).toBe(409);
    expect(refused.body!.error).toMatchObject({
      code: 'job_not_dead',
      message: expect.stringMatching(/redrive never touches a succeeded job/),
    });
    expect((await api('POST', '/v1/dead-jobs/00000000-0000-4000-8000-000000000000/redrive', {})).status).toBe(404);

    const dry = await api('POST', '/v1/dead-jobs/redrive', { ids: [a, b], dryRun: true });
    expect(dry.body).toMatchObject({ dryRun: true, redriven: [] });
    expect(dry.body!.wouldRedrive.sort()).toEqual([a, b].sort());

    const r = await api('POST', `/v1/dead-jobs/${a}/redrive`, { by: 'pat', reason: 'fixed the ERP endpoint' });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ id: a, state: 'pending', redriven: true });
    expect(r.body!.attemptLog.at(-1)).toMatchObject({ outcome: 'redriven', by: expect.stringMatching(/^pat \(api, 127\.0\.0\.1\)$/) });
    await until(a, 'succeeded');
    const again = await api('POST', `/v1/dead-jobs/${a}/redrive`, {});
    expect(again.status).toBe(409);

    expect((await api('POST', `/v1/dead-jobs/${b}/discard`, { by: 'pat' })).status).toBe(400);
    const d = await api('POST', `/v1/dead-jobs/${b}/discard`, { by: 'pat', reason: 'duplicate batch' });
    expect(d.body).toMatchObject({
      id: b,
      state: 'dead',
      discarded: { by: expect.stringMatching(/^pat \(api/), reason: 'duplicate batch' },
    });
    expect((await api('POST', `/v1/dead-jobs/${b}/discard`, { reason: 'again' })).body!.error.code).toBe('already_discarded');
    const many = await api('POST', '/v1/dead-jobs/discard', {
      type: 'ledger.post',
      since: new Date(Date.now() - 60_000).toISOString(),
      reason: 'cleanup',
    });
    expect(many.status).toBe(200);
  }, 120_000);

  it('DLQ, poison and stuck routes; bad input is a 400 naming the field', async () => {
    const dead = await deadJob();
    const look = await api('GET', '/v1/dlq/messages?limit=100');
    expect(look.status).toBe(200);
    expect(look.body!.letters.find((l: { jobId: string }) => l.jobId === dead)).toMatchObject({
      kind: 'dead-job',
      verdict: 'keep',
      jobState: 'dead',
    });
    const dry = await api('POST', '/v1/dlq/redrive', { dryRun: true, by: 'pat' });
    expect(dry.body).toMatchObject({ dryRun: true, method: 'resend' });
    const xml = `<order id="${Date.now()}"/>`;
    const msgId = await poisonMessage(xml);
    const poison = await api('GET', '/v1/poison-messages?reason=unparseable-body');
    expect(poison.body!.messages.find((m: { body: string }) => m.body === xml)).toMatchObject({
      reason: 'unparseable-body',
      workerId: expect.stringMatching(/^local-worker-/),
    });
    const discard = await api('POST', '/v1/dlq/discard', { messageIds: [msgId], reason: 'test sender', by: 'pat' });
    expect(discard.status).toBe(200);
    expect(discard.body!.letters.map((l: { messageId: string }) => l.messageId)).toEqual([msgId]);
    expect((await api('GET', '/v1/dlq/move-tasks')).body).toEqual({ local: true, moveTasks: [] });
    const cancel = await api('POST', '/v1/dlq/move-tasks/cancel', { taskHandle: 'task-handle-1', by: 'pat' });
    expect(cancel.status).toBe(409);
    expect(cancel.body!.error).toMatchObject({
      code: 'move_tasks_local',
      message: expect.stringMatching(/local SQS endpoint has no message move tasks/),
    });
    expect((await api('GET', '/v1/stuck-jobs?limit=5')).status).toBe(200);

    const bad: [string, string, unknown, string][] = [
      ['GET', '/v1/dead-jobs?since=yesterday', undefined, 'since'],
      ['GET', '/v1/dead-jobs?limit=0', undefined, 'limit'],
      ['GET', '/v1/dead-jobs?state=dead', undefined, 'state'],
      ['GET', '/v1/dead-jobs/not-a-uuid', undefined, 'id'],
      ['POST', '/v1/dead-jobs/redrive', { by: 'x' }, 'filter'],
      ['POST', '/v1/dead-jobs/redrive', { ids: ['nope'] }, 'ids'],
      ['POST', '/v1/dead-jobs/redrive', { all: true, maxAttempts: 101 }, 'maxAttempts'],
      ['POST', `/v1/dead-jobs/${dead}/redrive`, { bogus: 1 }, 'bogus'],
      ['POST', '/v1/dlq/discard', { messageIds: [], reason: 'x' }, 'messageIds'],
      ['POST', '/v1/dlq/move-tasks/cancel', { by: 'x' }, 'taskHandle'],
      ['POST', '/v1/dlq/move-tasks/cancel', { taskHandle: 42 }, 'taskHandle'],
      ['GET', '/v1/poison-messages?reason=odd', undefined, 'reason'],
    ];
    for (const [method, path, body, field] of bad) {
      const r = await api(method, path, body);
      expect(r.status, `${method} ${path}`).toBe(400);
      expect(r.body!.error.field, `${method} ${path}`).toBe(field);
    }
    expect((await api('DELETE', '/v1/dead-jobs')).status).toBe(405);
    expect((await api('GET', '/v1/dlq/nothing')).status).toBe(404);
  }, 120_000);
});

// --- The runbook --------------------------------------------------------------------------------

const NPX_JOBS = 'npx tsx bin/jobs.ts';

/** Every `npx tsx bin/jobs.ts …` and `curl …` command in the runbook: sh blocks and inline code. */
function runbookCommands(markdown: string): string[] {
  const out: string[] = [];
  let inSh = false;
  for (const line of markdown.split('\n')) {
    const t = line.trim();
    if (t.startsWith('```')) {
      inSh = t === '```sh';
      continue;
    }
    if (inSh) {
      if (t.startsWith('npx tsx bin/jobs.ts') || t.startsWith('curl ')) out.push(t);
      continue;
    }
    for (const m of line.matchAll(/`(npx tsx bin\/jobs\.ts [^`]+)`/g)) if (!m[1]!.includes('…')) out.push(m[1]!);
  }
  return out;
}

describe('docs/runbooks/README.md', () => {
  const commands = runbookCommands(readFileSync(RUNBOOK, 'utf8'));

  it('names the on-call commands it promises', () => {
    for (const needle of [
      'dlq list',
      'dlq redrive --by',
      'dlq redrive --move',
      'dlq move-cancel <task-handle>',
      'dlq discard <message-id>',
      'dead list',
      'dead show <job-id>',
      'dead redrive <job-id>',
      'dead discard <job-id>',
      'poison list',
      'stuck',
      'show <job-id> --watch',
      'cancel <job-id>',
    ]) {
      expect(
        commands.some((c) => c.includes(needle)),
        needle,
      ).toBe(true);
    }
    const curls = commands.filter((c) => c.startsWith('curl '));
    expect(curls.length).toBeGreaterThanOrEqual(5);
    // Every curl in the runbook is an on-call route: it must send the operator token, not the ERP clients' token.
    for (const c of curls) expect(c, c).toContain('-H "Authorization: Bearer $OPERATOR_TOKEN"');
  });

  /**
   * SQS message move tasks exist on AWS only: on the local stack these commands must refuse the
   * way the runbook says (the CLI's exit 1, curl's 22 for the API's 409), and in no other way.
   */
  const AWS_ONLY: [command: RegExp, exit: number, output: RegExp][] = [
    [
      /^npx tsx bin\/jobs\.ts dlq move-cancel /,
      1,
      /not cancelled: cannot cancel move task runbook-test-task-handle: the local SQS endpoint has no message move tasks/,
    ],
    [/^curl .*\/v1\/dlq\/move-tasks\/cancel"$/, 22, /"code":"move_tasks_local"/],
  ];

  it('every jobs and curl command runs against the local stack as written', async () => {
    // A fresh subject for each command that consumes one; read-only commands share.
    let shared: string | null = null;
    const jobFor = async (cmd: string): Promise<string> => {
      if (/dead (redrive|discard) <job-id>|dead-jobs\/<job-id>\/(redrive|discard)/.test(cmd)) return deadJob();
      if (/cancel <job-id>/.test(cmd)) return runningJob();
      if (/--watch/.test(cmd)) return enqueue({ batch: `RB-WATCH-${++seq}`, entries: 1, workMs: 600 });
      shared ??= await deadJob();
      return shared;
    };
    const fill = async (cmd: string): Promise<string> => {
      let c = cmd;
      if (c.includes('<job-id>')) c = c.replaceAll('<job-id>', await jobFor(c));
      if (c.includes('<message-id>')) c = c.replaceAll('<message-id>', await poisonMessage(`runbook poison ${++seq}`));
      return c
        .replaceAll('<type>', 'ledger.post')
        .replaceAll('<schedule>', 'month-end-close')
        .replaceAll('<you>', 'runbook-test')
        .replaceAll('<task-handle>', 'runbook-test-task-handle')
        .replace(/<[^<>"']*>/g, 'runbook test');
    };
    // The local stack's API has no token (neither API_TOKEN nor API_OPERATOR_TOKEN): the on-call
    // curls send `Authorization: Bearer ` with an empty $OPERATOR_TOKEN, which an open API accepts.
    const env = { ...cliEnv(), API_URL: stack.apiUrl, API_TOKEN: '', OPERATOR_TOKEN: '' };
    // The first `npx tsx bin/jobs.ts` command runs exactly as written; the rest run the same
    // command bundled (test/support/cli.ts): npx and tsx cost 1.5 s a command, 60-odd times.
    const bundled = `${JSON.stringify(process.execPath)} ${JSON.stringify(await jobsBundle())}`;
    let asWritten = false;
    const failures: string[] = [];
    for (const cmd of commands) {
      const filled = await fill(cmd);
      let command = filled;
      if (filled.startsWith(NPX_JOBS)) {
        if (asWritten) command = bundled + filled.slice(NPX_JOBS.length);
        asWritten = true;
      }
      const r = await sh(command, env);
      const awsOnly = AWS_ONLY.find(([re]) => re.test(cmd));
      const ok = awsOnly ? r.code === awsOnly[1] && awsOnly[2].test(`${r.stdout}\n${r.stderr}`) : r.code === 0;
      if (!ok)
        failures.push(
          `${filled}\n  exit ${r.code}${awsOnly ? ` (expected ${awsOnly[1]}, the local refusal)` : ''}\n  ${r.stderr.trim().slice(0, 500)}\n  ${r.stdout.trim().slice(0, 300)}`,
        );
    }
    expect(failures, failures.join('\n\n')).toEqual([]);
    for (const [re] of AWS_ONLY)
      expect(
        commands.some((c) => re.test(c)),
        String(re),
      ).toBe(true);
    expect(commands.length).toBeGreaterThanOrEqual(25);
    expect(asWritten).toBe(true);
  }, 240_000);
});
