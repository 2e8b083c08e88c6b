// The jobs command as a person runs it: a separate process, settings from the environment,
// exit codes and messages for bad input.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobsBundle, removeJobsBundle, runJobs } from '../support/cli.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { unknownTypeMessage } from '../support/registered-types.ts';
import { waitFor } from '../support/platform.ts';
import { startDbProxy } from '../../dev/db-proxy.ts';
import { usageFor } from '../../runtime/cli/main.ts';
import { defaultRegistry } from '../../runtime/handlers/index.ts';
import { describeJobType } from '../../runtime/handlers/types.ts';
import { JobStore } from '../../runtime/store/job-store.ts';
import { registerJobTypes } from '../../runtime/store/job-types.ts';

let db: TestDb;
beforeAll(async () => {
  [db] = await Promise.all([createTestDb(), jobsBundle()]);
  // As a running deployment has them: its API and workers registered their types at start.
  await registerJobTypes(db.pool, defaultRegistry(), { maxAttempts: 3 }, 'cli-test');
});
afterAll(async () => {
  await db.drop();
  await removeJobsBundle();
});

const jobsEnv = () => ({ ...process.env, DATABASE_URL: db.url, JOBS_LOCAL_ENV: '0', JOBS_QUEUE_URL: '' });

/** `jobs ARGS…` as a separate process (the bundled command: test/support/cli.ts). */
const jobs = (args: string[], env: Record<string, string> = {}) => runJobs(args, { env: { ...jobsEnv(), ...env } });

describe('jobs migrate', () => {
  it('a migration that cannot apply says which and why, exits 1, and prints no stack trace', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'cli-app-migrations-'));
    await writeFile(join(dir, '0001_stock.sql'), 'CREATE TABLE stock_count (id bigserial PRIMARY KEY);\n');
    const r = await jobs(['migrate'], { JOBS_APP_MIGRATIONS_DIR: dir });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(
      /^jobs: migration app\/0001_stock\.sql created table public\.stock_count, sequence public\.stock_count_id_seq: .*erp\.stock_count/,
    );
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });
});

describe('jobs connections', () => {
  it("names who holds the database's connections, by application name and user, with max_connections (the database connections alarm's first step)", async () => {
    // As a worker task's pool: 3 connections under its application name.
    const worker = db.newPool(3);
    const held = await Promise.all([1, 2, 3].map(() => worker.connect()));
    try {
      for (const c of held) await c.query("SET application_name = 'jobs-worker ecs-task-7'");
      const r = await jobs(['connections']);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/^connections: \d+ of max_connections \d+ /);
      expect(r.stdout).toMatch(/^ {4}3 {2}\S+ +jobs-worker ecs-task-7$/m);
      const json = JSON.parse((await jobs(['connections', '--json'])).stdout);
      expect(json.byApplication).toContainEqual(expect.objectContaining({ application: 'jobs-worker ecs-task-7', connections: 3 }));
      expect(json.maxConnections).toBeGreaterThan(0);
    } finally {
      for (const c of held) c.release();
      await worker.end();
    }
  });
});

describe('who asked', () => {
  it('without --by and without USER (a container shell), an action is recorded under the OS account, not "unknown"', async () => {
    const e = await jobs(['enqueue', 'ledger.post', '--payload', '{"batch":"CLI-WHO","entries":1}', '--json']);
    const job = JSON.parse(e.stdout);
    const cancel = await jobs(['cancel', job.id], { USER: '' });
    expect(cancel.code).toBe(0);
    const { rows } = await db.pool.query('SELECT cancelled_by FROM jobs.job WHERE id = $1', [job.id]);
    expect(rows[0].cancelled_by).toBe(`${userInfo().username} (cli)`);
  });
});

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
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/^already cancelled: nothing to do/);
  });

  it('show: a job with a checkpoint shows it (where a reclaimed attempt resumes)', async () => {
    const { id } = JSON.parse((await jobs(['enqueue', 'ledger.post', '--payload', '{"batch":"CLI-CP","entries":1}', '--json'])).stdout);
    await db.pool.query(`UPDATE jobs.job SET checkpoint = '{"after":"INV-42"}' WHERE id = $1`, [id]);
    expect((await jobs(['show', id])).stdout).toMatch(/^checkpoint {"after":"INV-42"}$/m);
  });

  it("list: a job that succeeded after a failed attempt says the error was an earlier attempt's, cut at a word", async () => {
    const e = await jobs(['enqueue', 'ledger.post', '--payload', '{"batch":"CLI-AGAIN","entries":1}', '--json']);
    const { id } = JSON.parse(e.stdout);
    const message = 'simulated failure of batch CLI-AGAIN on attempt 1 (fails the first 1 attempts)';
    await db.pool.query(`UPDATE jobs.job SET state = 'succeeded', attempt = 2, finished_at = now(), last_error = $2 WHERE id = $1`, [
      id,
      { name: 'Error', message, retryable: true },
    ]);
    const note = new RegExp(`^${id} .*succeeded .*  (.*)$`, 'm').exec((await jobs(['list', '--type', 'ledger.post'])).stdout)?.[1];
    expect(note).toBe('after a failed attempt: simulated failure of batch CLI-AGAIN on attempt 1 (fails…');
  });

  it('a job due later says when, and that its SQS message is sent only 15 min before (a newcomer took it for a lost one); a --run-at in the past is noted', async () => {
    const runAt = new Date(Date.now() + 2 * 3_600_000 + 60_000).toISOString();
    const later = await jobs(['enqueue', 'ledger.post', '--payload', '{"batch":"CLI-LATER","entries":1}', '--run-at', runAt]);
    expect(later.code).toBe(0);
    expect(later.stderr).toBe('');
    expect(later.stdout).toMatch(
      new RegExp(`^due +${runAt.replace(/[.]/g, '\\.')}, in 2 h (0|1) min \\(its SQS message is sent 15 min before\\)$`, 'm'),
    );
    const id = /^job +(\S+)$/m.exec(later.stdout)![1]!;
    expect((await jobs(['list', '--state', 'pending'])).stdout).toMatch(new RegExp(`^${id} .* due in 2 h (0|1) min$`, 'm'));
    const soon = await jobs([
      'enqueue',
      'ledger.post',
      '--payload',
      '{"batch":"CLI-SOON","entries":1}',
      '--run-at',
      new Date(Date.now() + 300_000).toISOString(),
    ]);
    expect(soon.stdout).toMatch(/^due +\S+, in (4|5) min \d+ s$/m);
    const past = await jobs([
      'enqueue',
      'ledger.post',
      '--payload',
      '{"batch":"CLI-PAST","entries":1}',
      '--run-at',
      '2020-01-01T00:00:00Z',
    ]);
    expect(past.code).toBe(0);
    expect(past.stderr).toBe('jobs: note: --run-at 2020-01-01T00:00:00Z is in the past: the job is due now\n');
    expect(past.stdout).not.toMatch(/^due /m);
  });

  it('enqueue of a ledger.post key whose job was cancelled answers with that job (the type keeps its keys)', async () => {
    const payload = '{"batch":"CLI-2","entries":2}';
    const job = JSON.parse((await jobs(['enqueue', 'ledger.post', '--payload', payload, '--key', 'cli-k2', '--json'])).stdout);
    expect((await jobs(['cancel', job.id])).code).toBe(0);
    const resent = await jobs(['enqueue', 'ledger.post', '--payload', payload, '--key', 'cli-k2']);
    expect(resent.stdout).toMatch(/^duplicate: the job with this key ended cancelled; its type keeps the key, so it is not enqueued again/);
    expect(resent.stdout).toContain(job.id);
  });

  it('enqueue of a type no running API or worker has registered (a handler added since they started) says the job will wait', async () => {
    await db.pool.query("DELETE FROM jobs.job_type WHERE type = 'inventory.cost'");
    try {
      const r = await jobs(['enqueue', 'inventory.cost', '--payload', '{"store":"S-NEW","period":"2026-11"}']);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/^enqueued$/m);
      expect(r.stderr).toBe(
        'jobs: note: no API or worker on this database has registered job type inventory.cost (each registers its types when it starts): the job waits, handed on between workers, until one that has the type runs. Locally: `npx tsx bin/jobs.ts local restart` after adding a handler (the stack keeps its database and jobs).\n',
      );
    } finally {
      await registerJobTypes(db.pool, defaultRegistry(), { maxAttempts: 3 }, 'cli-test');
    }
  });

  it('types --describe lists each payload field from the handler schema', async () => {
    const r = await jobs(['types', '--describe']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^ledger\.post +Post a batch of journal entries/m);
    expect(r.stdout).toMatch(/^ {2}entries +integer +required; 1 to 100000/m);
    expect(r.stdout).toMatch(/^ {2}workMs +integer +default 0; 0 to 3600000/m);
    expect(r.stdout).toMatch(/^ledger\.post .*\n {2}idempotency keys kept forever after the job ends$/m);
    expect(r.stdout).toMatch(/^ {2}period +string +required; .*matches YYYY-MM/m);
    // What the type decides besides its payload (newcomer trial: learnt only from an enqueue's refusal).
    expect(r.stdout).toMatch(
      /^inventory\.cost .*\n {2}lane bulk; stuck after 3600 s running\n {2}concurrency key costing:\{store\}: at most 1 at a time per key\n {2}at most 4 running at once across the fleet$/m,
    );
    // --json is GET /v1/job-types' shape, field for field.
    const json = JSON.parse((await jobs(['types', '--json'])).stdout);
    expect(json).toEqual(
      defaultRegistry()
        .types()
        .map((t) => JSON.parse(JSON.stringify(describeJobType(defaultRegistry().get(t)!)))),
    );
    expect(json.find((t: { type: string }) => t.type === 'ledger.post')).toMatchObject({ idempotency: { keep: 'forever' } });
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
    [
      ['enqueue', 'ledger.post', '--payload', '{"batch":"B","entries":1}', '--run-at', '2026-12-02T25:00:00Z'],
      /--run-at must be a real date between 1970 and 9999, e\.g\. 2026-12-01T06:00:00Z \(got "2026-12-02T25:00:00Z"\)/,
    ],
    [['enqueue', 'ledger.post', '--payload', '{"batch":1,"entries":1}'], /payload\.batch: must be a string \(got 1\)/],
    [['show', 'nope'], /ID must be a job id/],
    [['frobnicate'], /unknown command "frobnicate"/],
    [['list', '--colour', 'red'], /^jobs: unknown option --colour\n/],
  ])('refuses %j with exit 2 and the reason', async (args, message) => {
    const r = await jobs(args as string[]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
  });

  /** Queues where nothing listens: a worker that starts gets receive errors, one that refuses never asks. */
  const NOWHERE_SQS = {
    JOBS_QUEUE_URL: 'http://127.0.0.1:9/000000000000/jobs',
    JOBS_DLQ_URL: 'http://127.0.0.1:9/000000000000/jobs-dlq',
    JOBS_SQS_ENDPOINT: 'http://127.0.0.1:9',
    AWS_REGION: 'us-east-1',
  };

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

  it('refuses to start a worker against a database that lacks a migration of its build, naming it (exit 1)', async () => {
    const migrations = readdirSync(join('runtime', 'db', 'migrations')).sort();
    const behind = await createTestDb({ migrateThrough: migrations.length - 1 });
    try {
      const r = await jobs(['worker'], { DATABASE_URL: behind.url, ...NOWHERE_SQS });
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(
        `jobs worker: refusing to start.\nthe database lacks a migration this worker was built with: ${migrations.at(-1)}.`,
      );
    } finally {
      await behind.drop();
    }
  });

  it('a worker that started while the database did not answer checks it once it answers, and stops with exit 1 when it lacks a migration of its build', async () => {
    // Before: the check was skipped for good, and every claim then failed on the missing schema,
    // spending the waiting messages' receives toward the DLQ.
    const migrations = readdirSync(join('runtime', 'db', 'migrations')).sort();
    const behind = await createTestDb({ migrateThrough: migrations.length - 1 });
    const u = new URL(behind.url);
    const proxy = await startDbProxy({ host: u.hostname, port: Number(u.port) });
    try {
      proxy.failover(8); // the worker reaches its check within it on a loaded machine (3 s was close: flake review)
      const r = await runJobs(['worker'], {
        env: { ...jobsEnv(), DATABASE_URL: proxy.url(behind.url), LOG_LEVEL: 'warn', ...NOWHERE_SQS },
        timeoutMs: 30_000,
      });
      expect(r.stdout).toContain('starting, and checking again once it answers');
      expect(r.stderr).toContain(
        `jobs worker: stopping, as a start would refuse.\nthe database lacks a migration this worker was built with: ${migrations.at(-1)}.`,
      );
      expect(r.code).toBe(1);
    } finally {
      await proxy.stop();
      await behind.drop();
    }
  });

  it('jobs worker starts one worker service, not two (the bundle: every module shares its URL, and an "am I the entry?" test in runtime/apps/worker.ts held there too)', async () => {
    const child = spawn(process.execPath, [await jobsBundle(), 'worker'], {
      env: {
        ...jobsEnv(),
        LOG_LEVEL: 'info',
        // Nothing listens there: the worker starts, then its receives fail and retry.
        ...NOWHERE_SQS,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    await waitFor(async () => out.includes('worker service started'), 15_000, `worker started: ${out}`);
    await new Promise((r) => setTimeout(r, 1000)); // a second one would be up by now
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(out.match(/worker service started/g)).toHaveLength(1);
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
    expect(r.stderr).toMatch(/unknown option --frob\n[\s\S]*usage:\n {2}jobs dead redrive .*--max-attempts N/);
    const e = await jobs(['enqueue', 'ledger.post']);
    expect(e.code).toBe(2);
    expect(e.stderr).toMatch(
      /^jobs: --payload is required: the ledger\.post job's payload, a JSON object .*@FILE .*- to read it from stdin/,
    );
  });

  it("enqueue --payload @FILE and - (stdin): a payload past the shell's 128 KiB argument limit reaches the 256 KiB check, named", async () => {
    // Newcomer trial: `--payload "$P"` of 140 KB failed in the shell (Argument list too long), and
    // no other way in existed, so the payload limit could not be met from the CLI.
    const dir = await mkdtemp(join(tmpdir(), 'cli-payload-'));
    // With a byte-order mark, as some editors save it.
    await writeFile(join(dir, 'small.json'), '\uFEFF{"batch":"CLI-FILE","entries":1}');
    const fromFile = await jobs(['enqueue', 'ledger.post', '--payload', `@${join(dir, 'small.json')}`, '--json']);
    expect(fromFile.code).toBe(0);
    expect(JSON.parse(fromFile.stdout)).toMatchObject({ type: 'ledger.post', payload: { batch: 'CLI-FILE', entries: 1 } });
    const fromStdin = await runJobs(['enqueue', 'ledger.post', '--payload', '-', '--json'], {
      env: jobsEnv(),
      input: '{"batch":"CLI-STDIN","entries":1}',
    });
    expect(fromStdin.code).toBe(0);
    expect(JSON.parse(fromStdin.stdout)).toMatchObject({ payload: { batch: 'CLI-STDIN' } });
    await writeFile(join(dir, 'big.json'), JSON.stringify({ batch: 'CLI-BIG', entries: 1, note: 'x'.repeat(300_000) }));
    const big = await jobs(['enqueue', 'ledger.post', '--payload', `@${join(dir, 'big.json')}`]);
    expect(big.code).toBe(2);
    expect(big.stderr).toMatch(/payload: is 300\d{3} bytes; the limit is 262144/);
    const missing = await jobs(['enqueue', 'ledger.post', '--payload', `@${join(dir, 'nope.json')}`]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/--payload @.*nope\.json: cannot read .*nope\.json \(ENOENT\)/);
    await writeFile(join(dir, 'bad.json'), '{"batch":');
    const bad = await jobs(['enqueue', 'ledger.post', '--payload', `@${join(dir, 'bad.json')}`]);
    expect(bad.stderr).toMatch(/--payload \(read from .*bad\.json\) is not valid JSON/);
  });
});

describe('arguments a command does not take', () => {
  const id = '01900000-0000-7000-8000-000000000001';
  // Each command names the extra arguments and prints its own usage; commands taking many ids keep taking them.
  it.each([
    [
      ['enqueue', 'stock.recount', 'extra', 'junk', '--payload', '{"warehouse":"WH-1"}'],
      'jobs enqueue',
      '"extra", "junk"',
      'jobs enqueue TYPE',
    ],
    [['show', id, 'extra'], 'jobs show', '"extra"', 'jobs show ID'],
    [['list', 'pending'], 'jobs list', '"pending"', 'jobs list [--state S]'],
    [['migrate', 'now'], 'jobs migrate', '"now"', 'jobs migrate'],
    [['dead', 'show', id, id], 'jobs dead show', `"${id}"`, 'jobs dead show ID'],
    [['schedules', 'pause', 'every-minute-demo', 'please'], 'jobs schedules pause', '"please"', 'jobs schedules pause NAME'],
  ])('refuses %j with exit 2, naming the extra arguments, then the usage', async (args, command, extra, usage) => {
    const r = await jobs(args);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`^jobs: ${command}: unexpected arguments? ${extra.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} \\(`));
    expect(r.stderr).toContain(`\nusage:\n  ${usage}`);
  });

  it('an unquoted --key with a space is refused, not cut to its first word; nothing is enqueued', async () => {
    const r = await jobs(['enqueue', 'ledger.post', '--payload', '{"batch":"CLI-X","entries":1}', '--key', 'has', 'space']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^jobs: jobs enqueue: unexpected argument "space" \(.*quote the value: --key 'has space'\)/);
    expect((await jobs(['list', '--type', 'ledger.post', '--json'])).stdout).not.toContain('CLI-X');
  });

  it('commands taking many ids still take them', async () => {
    const ids = ['01900000-0000-7000-8000-000000000002', '01900000-0000-7000-8000-000000000003'];
    const r = await jobs(['republish', ...ids, '--json']);
    expect(r.stderr).not.toMatch(/unexpected argument/);
    // Neither job exists: both skipped (exit 1), not refused as bad usage (exit 2).
    expect(r.code).toBe(1);
    expect(
      JSON.parse(r.stdout)
        .skipped.map((s: { id: string }) => s.id)
        .sort(),
    ).toEqual(ids);
  });

  it("jobs help COMMAND prints that command's usage; an unknown one exits 2", async () => {
    const r = await jobs(['help', 'dead', 'redrive']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^usage:\n {2}jobs dead redrive \(ID… \| --type T/);
    expect((await jobs(['help', 'frobnicate'])).code).toBe(2);
  });
});

describe('jobs enqueue --key and --concurrency-key: the flag, not the request field', () => {
  it.each([
    ['an empty --key', ['--key', ''], /^jobs: --key must be a string of 1 to 200 characters \(got an empty one\)$/m],
    ['a 201-character --key', ['--key', 'k'.repeat(201)], /^jobs: --key must be a string of 1 to 200 characters \(got 201 characters\)$/m],
    [
      'a 250-character --concurrency-key',
      ['--concurrency-key', 'c'.repeat(250)],
      /^jobs: --concurrency-key must be a string of 1 to 200 characters \(got 250 characters\)$/m,
    ],
    ['--max-attempts lots', ['--max-attempts', 'lots'], /^jobs: --max-attempts must be a whole number from 1 to 100 \(got lots\)$/m],
    [
      'a --key with an escape character',
      ['--key', 'k\u001b[2J'],
      /^jobs: --key must not contain control characters \(U\+001B at character 2\)$/m,
    ],
  ])('%s', async (_label, flags, message) => {
    const r = await jobs(['enqueue', 'ledger.post', '--payload', '{"batch":"CLI-K","entries":1}', ...flags]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/idempotencyKey|concurrencyKey|maxAttempts/);
  });
});

describe('jobs show --watch of a job blocked by its concurrency key', () => {
  /** `jobs show ID --watch`, piped: its first line, then stop it with Ctrl-C (exit 130). */
  async function firstWatchLine(id: string): Promise<{ line: string; code: number | null }> {
    const child = spawn(process.execPath, [await jobsBundle(), 'show', id, '--watch', '--interval', '0.2'], {
      env: jobsEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    const line = await new Promise<string>((resolve, reject) => {
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('\n')) resolve(out.split('\n')[0]!);
      });
      child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
      void exited.then(() => reject(new Error(`watch ended before printing a line: ${out}`)));
    });
    child.kill('SIGINT');
    return { line, code: await exited };
  }

  it('says what jobs show says: the key and the job holding it, not "waiting for a worker"', async () => {
    const enqueue = async (batch: string) =>
      JSON.parse(
        (
          await jobs([
            'enqueue',
            'ledger.post',
            '--payload',
            JSON.stringify({ batch, entries: 1 }),
            '--concurrency-key',
            'ledger:company-1',
            '--concurrency-limit',
            '1',
            '--json',
          ])
        ).stdout,
      ).id as string;
    const holder = await enqueue('CLI-W1');
    const blocked = await enqueue('CLI-W2');
    // A worker's claim: the first runs, the second is blocked behind the key.
    const claim = await new JobStore(db.pool).claimKeyed([holder, blocked], 'worker-w', 60);
    expect(claim.blocked).toEqual([blocked]);

    const show = await jobs(['show', blocked]);
    const waiting = /^waiting {3}(for key ledger:company-1 since \S+, held by job (\S+) \(starts when the key has room\))$/m.exec(
      show.stdout,
    );
    expect(waiting?.[2]).toBe(holder);

    const watched = await firstWatchLine(blocked);
    expect(watched.line).toMatch(/^\d\d:\d\d:\d\d {2}\[-+\] {3}0% {2}pending · attempt 0 \(0 of \d+ used\) · waiting /);
    expect(watched.line).not.toMatch(/waiting for a worker/);
    // The same words as `jobs show`, from the same reading.
    expect(watched.line.endsWith(`· waiting ${waiting![1]}`)).toBe(true);
    expect(watched.code).toBe(130);
  }, 30_000);
});

describe("the README's table of the jobs command", () => {
  // The commands the table spells out (the on-call ones point at their own section): every flag
  // their usage lists is in the table's rows for that command.
  it.each(['local', 'migrate', 'api', 'worker', 'enqueue', 'show', 'cancel', 'list', 'types', 'republish', 'help'])(
    'jobs %s: every flag of its usage',
    (command) => {
      const readme = readFileSync('README.md', 'utf8');
      const start = readme.indexOf('## The `jobs` command\n');
      const section = readme.slice(start, readme.indexOf('\n## ', start + 1));
      const rows = section.split('\n').filter((l) => l.startsWith('| `') && l.includes(`jobs ${command}`));
      expect(rows.length, `a row for jobs ${command}`).toBeGreaterThan(0);
      const flags = (text: string) => new Set(text.match(/--[a-z][a-z-]*/g) ?? []);
      const documented = flags(rows.map((r) => r.split(' | ')[0]).join(' '));
      const usage = usageFor([command])!
        .split('\n')
        .filter((l) => l.startsWith(`  jobs ${command} `) || l === `  jobs ${command}`);
      expect([...flags(usage.map((l) => l.split(/ {3,}/)[0]).join(' '))].filter((f) => !documented.has(f))).toEqual([]);
    },
  );
});
