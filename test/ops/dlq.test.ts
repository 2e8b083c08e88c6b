// The dead-letter queue reconciled with the job table, on a local SQS endpoint (fauxqs) and a real
// PostgreSQL: each kind of dead letter judged by its job, a redrive that resends only what has a
// job to run, drops what needs nothing, keeps (and reports) dead jobs and poison, a discard with a
// reason, and a look that changes nothing.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { ledgerPost } from '../../runtime/handlers/ledger-post.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { startLocalSqs, type LocalSqs } from '../../dev/fauxqs.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { DeadJobService } from '../../runtime/oncall/dead-jobs.ts';
import { DeadLetterService, SqsDeadLetterQueue, type ReconciledLetter } from '../../runtime/oncall/dlq.ts';
import { listPoisonMessages, recordPoisonMessage } from '../../runtime/store/poison.ts';
import { jobMessageBody, parseJobMessage } from '../../runtime/queue/message.ts';
import { createSqsClient, SqsQueue } from '../../runtime/queue/sqs.ts';
import { Worker } from '../../runtime/worker/worker.ts';
import { createPlatform, FAST_TIMINGS, type Platform } from '../support/platform.ts';

const registry = new JobRegistry([
  ledgerPost,
  defineJob<Record<string, never>, null>({ type: 'test.noop', description: 'does nothing', parse: () => ({}), run: async () => null }),
]);

let p: Platform;
let sqs: LocalSqs;
let queue: SqsQueue;
let dlqQueue: SqsQueue;
let service: DeadLetterService;
let reporter: Worker;
beforeAll(async () => {
  p = await createPlatform({ registry });
  sqs = await startLocalSqs({ timings: { visibilityTimeoutSeconds: 30, maxReceiveCount: 10 }, prefix: 'ops-dlq' });
  const client = createSqsClient({ endpoint: sqs.endpoint, region: 'us-east-1' });
  queue = new SqsQueue({ queueUrl: sqs.queueUrl, client });
  dlqQueue = new SqsQueue({ queueUrl: sqs.dlqUrl, client });
  service = new DeadLetterService({
    pool: p.db.pool,
    dlq: new SqsDeadLetterQueue({ dlqUrl: sqs.dlqUrl, queueUrl: sqs.queueUrl, client, local: true }),
    queue,
    log: silentLogger,
  });
  // A worker only to write dead letters exactly as the worker does (reportDeadJob).
  reporter = new Worker({
    pool: p.db.pool,
    queue,
    dlq: dlqQueue,
    registry,
    publisher: p.publisher,
    timings: FAST_TIMINGS,
    log: silentLogger,
    workerId: 'worker-x',
  });
});
afterAll(async () => {
  await sqs.stop();
  await p.close();
});

async function drain(q: SqsQueue) {
  for (;;) {
    const got = await q.receive(10, 0);
    if (got.length === 0) return;
    await q.delete(got.map((m) => m.receipt));
  }
}
beforeEach(async () => {
  await drain(queue);
  await drain(dlqQueue);
});

async function enqueue(type = 'test.noop', payload: unknown = {}) {
  const [r] = await p.client.enqueueNow({ type, payload });
  return r!.job;
}
async function makeDead() {
  const job = await enqueue();
  const [c] = await p.store.claim([job.id], 'worker-x', 30);
  const dead = await p.store.fail(
    { id: c!.id, attempt: c!.attempt },
    { name: 'Error', message: 'ERP endpoint said 500', retryable: true },
    0,
    true,
  );
  expect(await reporter.reportDeadJob(dead!, 'non-retryable', 'src-1')).toBe(true);
  return dead!;
}
async function makeSucceeded() {
  const job = await enqueue();
  const [c] = await p.store.claim([job.id], 'worker-x', 30);
  expect(await p.store.completeMany([{ id: c!.id, attempt: c!.attempt, result: null }])).toEqual(new Set());
  return job;
}

/** One of each kind of dead letter, with the job state that decides it. */
async function scenario() {
  const dead = await makeDead();
  const discarded = await makeDead();
  await new DeadJobService(p.db.pool, p.publisher).discard({ ids: [discarded.id], by: 'ops', reason: 'posted by hand' });
  const succeeded = await makeSucceeded();
  // A dead letter for a job that later succeeded (redriven, then done): the worker's format.
  await reporter.reportDeadJob({ ...(await p.store.get(succeeded.id))!, state: 'dead' }, 'attempts-exhausted');
  const pending = await enqueue();
  // SQS redrove a crash-looping message: the raw job message, no Reason attribute.
  await dlqQueue.send([{ body: jobMessageBody(pending.id, pending.type) }]);
  const running = await enqueue();
  await p.store.claim([running.id], 'worker-live', 60);
  await dlqQueue.send([{ body: jobMessageBody(running.id, running.type) }]);
  const expired = await enqueue();
  await p.store.claim([expired.id], 'worker-gone', 30);
  await p.db.pool.query("UPDATE jobs.job SET lease_expires_at = now() - interval '5 minutes' WHERE id = $1", [expired.id]);
  await dlqQueue.send([{ body: jobMessageBody(expired.id, expired.type) }]);
  const gone = '99999999-8888-4777-8666-555555555555';
  await dlqQueue.send([
    {
      body: jobMessageBody(gone, 'ledger.post'),
      attributes: { Reason: 'unknown-job', Detail: `no job ${gone} in the job table`, SourceMessageId: 'src-gone', JobId: gone },
    },
  ]);
  await dlqQueue.send([
    { body: '<invoice id="7"/>', attributes: { Reason: 'unparseable-body', Detail: 'body is not JSON', SourceMessageId: 'src-xml' } },
  ]);
  return { dead, discarded, succeeded, pending, running, expired, gone };
}

const byJob = (letters: ReconciledLetter[]) => Object.fromEntries(letters.map((l) => [l.jobId ?? l.body, l]));
const dlqBodies = () => sqs.inspect('ops-dlq-dlq').bodies;

describe('dead-letter queue, reconciled with the job table', () => {
  it('look: judges every dead letter by its job and changes nothing', async () => {
    const s = await scenario();
    const r = await service.look();
    expect(r.complete).toBe(true);
    expect(r.letters).toHaveLength(8);
    const v = byJob(r.letters);
    expect(v[s.dead.id]).toMatchObject({
      kind: 'dead-job',
      reason: 'non-retryable',
      verdict: 'keep',
      jobState: 'dead',
      detail: 'ERP endpoint said 500',
    });
    expect(v[s.dead.id]!.why).toMatch(/redrive it \(jobs dead redrive /);
    expect(v[s.discarded.id]).toMatchObject({ verdict: 'drop', why: 'job was discarded by ops: posted by hand' });
    expect(v[s.succeeded.id]).toMatchObject({ verdict: 'drop', jobState: 'succeeded' });
    expect(v[s.pending.id]).toMatchObject({ kind: 'sqs-redrive', verdict: 'resend' });
    expect(v[s.running.id]).toMatchObject({ verdict: 'drop', why: expect.stringMatching(/worker-live holds a live lease/) });
    expect(v[s.expired.id]).toMatchObject({ verdict: 'resend', why: expect.stringMatching(/lease that expired/) });
    expect(v[s.gone]).toMatchObject({
      kind: 'poison',
      verdict: 'keep',
      jobState: null,
      why: `poison: no job ${s.gone} in the job table; never resent`,
    });
    expect(v['<invoice id="7"/>']).toMatchObject({ kind: 'poison', reason: 'unparseable-body', verdict: 'keep' });
    expect(r.counts).toEqual({ resend: 2, drop: 3, keep: 3 });
    // Nothing moved, nothing deleted, and everything visible again at once.
    expect(sqs.inspect('ops-dlq-queue').bodies).toEqual([]);
    expect(sqs.inspect('ops-dlq-dlq')).toMatchObject({ ready: 8, inflight: 0 });
  });

  it('redrive: resends only jobs that need a message, drops the obsolete, keeps dead jobs and poison; recorded', async () => {
    const s = await scenario();
    const r = await service.redrive({ by: 'oncall-1' });
    expect(r.counts).toEqual({ resend: 2, drop: 3, keep: 3 });
    const v = byJob(r.letters);
    expect(v[s.pending.id]!.done).toBe('resent');
    expect(v[s.gone]!.done).toBe('kept');
    // The job queue got clean job messages for the pending and the expired job, and nothing else:
    // never the succeeded, running or dead job, never the job that does not exist.
    const sent = sqs
      .inspect('ops-dlq-queue')
      .bodies.map((b) => (parseJobMessage(b) as { ok: true; message: { jobId: string } }).message.jobId);
    expect(sent.sort()).toEqual([s.pending.id, s.expired.id].sort());
    // The DLQ keeps the dead job, and the poison (visible again).
    expect(sqs.inspect('ops-dlq-dlq')).toMatchObject({ ready: 3, inflight: 0 });
    const kept = dlqBodies().join('\n');
    expect(kept).toContain(s.dead.id);
    expect(kept).toContain(s.gone);
    expect(kept).not.toContain(s.succeeded.id);
    const actions = await p.db.pool.query("SELECT action, job_id, reason FROM jobs.operator_action WHERE by = 'oncall-1' ORDER BY action");
    expect(actions.rows.map((a) => a.action)).toEqual(['dlq-drop', 'dlq-drop', 'dlq-drop', 'dlq-resend', 'dlq-resend']);
    // A second pass finds only what stays.
    const again = await service.redrive({ by: 'oncall-1' });
    expect(again.counts).toEqual({ resend: 0, drop: 0, keep: 3 });
  });

  it('a dry run and a --move on the local endpoint say what they do', async () => {
    await scenario();
    const dry = await service.redrive({ by: 'x', dryRun: true });
    expect(dry).toMatchObject({ dryRun: true, counts: { resend: 2, drop: 3, keep: 3 } });
    expect(sqs.inspect('ops-dlq-dlq').ready).toBe(8);
    const moved = await service.redrive({ by: 'x', move: true });
    expect(moved.notes[0]).toMatch(/local SQS endpoint has no StartMessageMoveTask: moved by receive and resend/);
    expect(moved.counts.resend).toBe(2);
  });

  it("after jobs dead redrive, the dead job's letter is resent; after a discard, dropped", async () => {
    const dead = await makeDead();
    const other = await makeDead();
    const deadJobs = new DeadJobService(p.db.pool, p.publisher);
    await deadJobs.redrive({ ids: [dead.id], by: 'ops' });
    await deadJobs.discard({ ids: [other.id], by: 'ops', reason: 'customer withdrew the batch' });
    const r = await service.redrive({ by: 'ops' });
    expect(byJob(r.letters)[dead.id]).toMatchObject({ verdict: 'resend', jobState: 'pending' });
    expect(byJob(r.letters)[other.id]).toMatchObject({ verdict: 'drop', why: 'job was discarded by ops: customer withdrew the batch' });
    expect(sqs.inspect('ops-dlq-dlq').ready).toBe(0);
  });

  it('a job redriven and dead again: its earlier letter is dropped as superseded, the newer one kept', async () => {
    const dead = await makeDead();
    await new DeadJobService(p.db.pool, p.publisher).redrive({ ids: [dead.id], by: 'ops' });
    const [c] = await p.store.claim([dead.id], 'worker-x', 30);
    const again = await p.store.fail(
      { id: c!.id, attempt: c!.attempt },
      { name: 'Error', message: 'ERP endpoint said 503', retryable: true },
      0,
      true,
    );
    expect(again!.finishedAt!.getTime()).toBeGreaterThan(dead.finishedAt!.getTime());
    expect(await reporter.reportDeadJob(again!, 'attempts-exhausted', 'src-2')).toBe(true);
    const look = await service.look();
    expect(look.letters.map((l) => [l.detail, l.verdict])).toEqual(
      expect.arrayContaining([
        ['ERP endpoint said 500', 'drop'],
        ['ERP endpoint said 503', 'keep'],
      ]),
    );
    expect(look.letters.find((l) => l.verdict === 'drop')!.why).toMatch(
      /^an earlier death's report .*: the job was redriven and died again at /,
    );
    const r = await service.redrive({ by: 'ops' });
    expect(r.counts).toEqual({ resend: 0, drop: 1, keep: 1 });
    expect(dlqBodies()).toHaveLength(1);
    expect(dlqBodies()[0]).toContain('ERP endpoint said 503');
  });

  it('discard: deletes the named dead letters with a reason, marks their poison records resolved, reports the unknown ones', async () => {
    await recordPoisonMessage(p.db.pool, {
      sourceMessageId: 'src-xml',
      reason: 'unparseable-body',
      detail: 'body is not JSON',
      body: '<invoice id="7"/>',
      attributes: {},
      workerId: 'w',
      receiveCount: 1,
    });
    await scenario();
    const look = await service.look();
    const xml = look.letters.find((l) => l.body.startsWith('<invoice'))!;
    await expect(service.discard({ messageIds: [xml.messageId], by: 'ops', reason: ' ' })).rejects.toThrow(/reason: is required/);
    const r = await service.discard({
      messageIds: [xml.messageId, 'aaaaaaaa-0000-4000-8000-000000000000'],
      by: 'ops',
      reason: 'legacy EDI bridge, switched off',
    });
    expect(r.letters.map((l) => l.messageId)).toEqual([xml.messageId]);
    expect(r.letters[0]!.done).toBe('discarded');
    expect(r.notFound).toEqual(['aaaaaaaa-0000-4000-8000-000000000000']);
    expect(sqs.inspect('ops-dlq-dlq')).toMatchObject({ ready: 7, inflight: 0 });
    expect(dlqBodies()).not.toContain('<invoice id="7"/>');
    const poison = await listPoisonMessages(p.db.pool, { limit: 10, includeResolved: true });
    expect(poison.messages.find((m) => m.sourceMessageId === 'src-xml')).toMatchObject({
      resolvedBy: 'ops',
      resolution: 'dead letter discarded: legacy EDI bridge, switched off',
    });
    expect((await listPoisonMessages(p.db.pool, { limit: 10 })).messages.find((m) => m.sourceMessageId === 'src-xml')).toBeUndefined();
    const audit = await p.db.pool.query("SELECT reason, detail FROM jobs.operator_action WHERE action = 'dlq-discard'");
    expect(audit.rows[0]).toMatchObject({
      reason: 'legacy EDI bridge, switched off',
      detail: { body: '<invoice id="7"/>', kind: 'poison' },
    });
  });

  it('discard: a letter named by the source id `jobs poison list` shows is found; one whose job still needs it is kept, saying what to do instead', async () => {
    // On-call drill: `poison list` gave the source id, `dlq discard` wanted the DLQ's and said
    // "not found"; and a pending job's letter was deleted, reported as "resent".
    const s = await scenario();
    const pendingLetter = (await service.look()).letters.find((l) => l.jobId === s.pending.id)!;
    const r = await service.discard({ messageIds: ['src-xml', pendingLetter.messageId], by: 'ops', reason: 'cleanup' });
    expect(r.notFound).toEqual([]);
    const v = byJob(r.letters);
    expect(v['<invoice id="7"/>']).toMatchObject({ done: 'discarded' });
    expect(v[s.pending.id]).toMatchObject({ done: 'kept' });
    expect(v[s.pending.id]!.why).toMatch(
      new RegExp(
        `^not discarded: its job is pending and still needs a message .*; \`jobs dlq redrive\` resends it, or \`jobs cancel ${s.pending.id}\` first`,
      ),
    );
    expect(dlqBodies()).not.toContain('<invoice id="7"/>');
    expect(dlqBodies().some((b) => b.includes(s.pending.id))).toBe(true);
    expect((await p.store.get(s.pending.id))!.state).toBe('pending');
  });
});
