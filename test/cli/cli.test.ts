// The jobs command as a person runs it: a separate process, settings from the environment,
// exit codes and messages for bad input.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../support/db.ts';
import { unknownTypeMessage } from '../support/registered-types.ts';
import { defaultRegistry } from '../../runtime/handlers/index.ts';

const run = promisify(execFile);
let db: TestDb;
beforeAll(async () => {
  db = await createTestDb();
});
afterAll(() => db.drop());

async function jobs(args: string[], env: Record<string, string> = {}) {
  try {
    const r = await run(process.execPath, ['--import', 'tsx', 'bin/jobs.ts', ...args], {
      env: { ...process.env, DATABASE_URL: db.url, JOBS_LOCAL_ENV: '0', JOBS_QUEUE_URL: '', ...env },
    });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const err = e as { code: number; stdout: string; stderr: string };
    return { code: err.code, stdout: err.stdout, stderr: err.stderr };
  }
}

describe('jobs command', () => {
  it('enqueue → show → list → cancel', async () => {
    const e = await jobs(['enqueue', 'ledger.post', '--payload', '{"batch":"CLI-1","entries":2}', '--key', 'cli-k', '--json']);
    expect(e.code).toBe(0);
    const job = JSON.parse(e.stdout);
    expect(job).toMatchObject({ type: 'ledger.post', state: 'pending', duplicate: false });
    const dup = await jobs(['enqueue', 'ledger.post', '--payload', '{"batch":"CLI-1","entries":2}', '--key', 'cli-k']);
    expect(dup.stdout).toMatch(/^duplicate: an active job with this key exists/);
    expect(dup.stdout).toContain(job.id);
    const show = await jobs(['show', job.id]);
    expect(show.stdout).toMatch(new RegExp(`job +${job.id}[\\s\\S]*state +pending[\\s\\S]*key +cli-k`));
    const list = await jobs(['list', '--state', 'pending']);
    expect(list.stdout).toContain(job.id);
    const cancel = await jobs(['cancel', job.id, '--by', 'ops@example']);
    expect(cancel.code).toBe(0);
    expect(cancel.stdout).toMatch(/cancelled by ops@example \(cli\)/);
    const again = await jobs(['cancel', job.id]);
    expect(again.stdout).toMatch(/already ended \(cancelled\)/);
  });

  it('enqueue of a ledger.post key whose job was cancelled answers with that job (the type keeps its keys)', async () => {
    const payload = '{"batch":"CLI-2","entries":2}';
    const job = JSON.parse((await jobs(['enqueue', 'ledger.post', '--payload', payload, '--key', 'cli-k2', '--json'])).stdout);
    expect((await jobs(['cancel', job.id])).code).toBe(0);
    const resent = await jobs(['enqueue', 'ledger.post', '--payload', payload, '--key', 'cli-k2']);
    expect(resent.stdout).toMatch(/^duplicate: the job with this key ended cancelled; its type keeps the key, so it is not enqueued again/);
    expect(resent.stdout).toContain(job.id);
  });

  it('types --describe lists each payload field from the handler schema', async () => {
    const r = await jobs(['types', '--describe']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^ledger\.post +Post a batch of journal entries/m);
    expect(r.stdout).toMatch(/^ {2}entries +integer +required; 1 to 100000/m);
    expect(r.stdout).toMatch(/^ {2}workMs +integer +default 0; 0 to 3600000/m);
    expect(r.stdout).toMatch(/^ledger\.post .*\n {2}idempotency keys kept forever after the job ends$/m);
    expect(r.stdout).toMatch(/^ {2}period +string +required; .*matches YYYY-MM/m);
    const plain = (await jobs(['types'])).stdout;
    expect(plain).not.toMatch(/^ {2}entries/m);
    // Every registered type, one line each, whichever the application registered.
    expect(
      plain
        .split('\n')
        .filter((l) => /^\S/.test(l))
        .map((l) => l.split(/\s+/)[0]),
    ).toEqual(defaultRegistry().types());
  });

  it.each([
    [['enqueue', 'ledger.post', '--payload', '{"batch":'], /--payload is not valid JSON/],
    // The command knows the registered types (runtime/handlers/index.ts), whichever they are.
    [['enqueue', 'ledger.pots', '--payload', '{}'], unknownTypeMessage('ledger.pots', defaultRegistry())],
    [['enqueue', 'ledger.post', '--payload', '{"batch":"x"}'], /payload.entries: is required/],
    [['list', '--state', 'done'], /--state must be one of pending, running, succeeded, dead, cancelled/],
    [['show', 'nope'], /ID must be a job id/],
    [['frobnicate'], /unknown command "frobnicate"/],
    [['list', '--colour', 'red'], /Unknown option '--colour'/],
  ])('refuses %j with exit 2 and the reason', async (args, message) => {
    const r = await jobs(args as string[]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
  });

  it('refuses to start a worker with a bad configuration, naming the variable and the rule', async () => {
    const r = await jobs(['worker'], {
      JOBS_LEASE_SECONDS: '6',
      JOBS_HEARTBEAT_SECONDS: '5',
      JOBS_QUEUE_URL: 'http://localhost:1/q',
      JOBS_DLQ_URL: 'http://localhost:1/d',
      AWS_REGION: 'us-east-1',
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(
      /refusing to start[\s\S]*\[heartbeat-within-lease\] JOBS_HEARTBEAT_SECONDS = 5 must be at most 1\/3 of JOBS_LEASE_SECONDS = 6/,
    );
  });

  it('refuses a queue without a region, like the services: no silent us-east-1', async () => {
    const noRegion = { JOBS_QUEUE_URL: 'https://sqs.eu-west-1.amazonaws.com/123456789012/jobs', AWS_REGION: '', JOBS_SQS_ENDPOINT: '' };
    for (const args of [
      ['enqueue', 'ledger.post', '--payload', '{"batch":"CLI-R","entries":1}'],
      ['dead', 'list'],
    ]) {
      const r = await jobs(args, noRegion);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(
        /\[aws-region-set\] AWS_REGION is required \(the region of the queues, e\.g\. AWS_REGION=eu-west-1\); it defaults to us-east-1 only next to a local JOBS_SQS_ENDPOINT/,
      );
    }
    const list = await jobs(['list', '--type', 'ledger.post', '--json']);
    expect(list.stdout).not.toContain('CLI-R');
  });

  it('show of an unknown job exits 1', async () => {
    const r = await jobs(['show', '00000000-0000-4000-8000-000000000000']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/no job/);
  });
});

describe('help and usage errors', () => {
  it('every command answers --help with its own usage (exit 0), not a parse error', async () => {
    const r = await jobs(['dead', 'redrive', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^usage:\n {2}jobs dead redrive \(ID… \| --type T/);
    expect(r.stdout).not.toMatch(/jobs dead list/);
    const show = await jobs(['show', '01900000-0000-7000-8000-000000000000', '--help']);
    expect(show.code).toBe(0);
    expect(show.stdout).toMatch(/jobs show ID \[--json\] \[--watch/);
  });

  it('an unknown option says which, then the valid ones (exit 2); enqueue without --payload says it is required', async () => {
    const r = await jobs(['dead', 'redrive', '--frob']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/Unknown option '--frob'[\s\S]*usage:\n {2}jobs dead redrive .*--max-attempts N/);
    const e = await jobs(['enqueue', 'ledger.post']);
    expect(e.code).toBe(2);
    expect(e.stderr).toMatch(/^jobs: jobs enqueue ledger\.post: --payload is required/);
  });
});
