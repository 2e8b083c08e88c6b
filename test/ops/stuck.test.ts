// Stuck-job detection against a real PostgreSQL: the claim stamps claimed_at (a retried job is
// judged by its current attempt, not its first start), a type's expectedMaxSeconds or the default,
// pending-and-due and expired-lease jobs nobody picked up; the reporter publishes the count as a
// gauge (CloudWatch PutMetricData, mocked) and logs each stuck job once.
import { CloudWatchClient, PutMetricDataCommand } from '@aws-sdk/client-cloudwatch';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { METRIC } from '../../runtime/observability/metric-names.ts';
import {
  cloudWatchGauge,
  countStuckJobs,
  describeStuck,
  findStuckJobs,
  StuckJobReporter,
  stuckThresholdsFromEnv,
} from '../../runtime/oncall/stuck.ts';
import { capturingLogger } from '../api/support.ts';
import { createPlatform, type Platform } from '../support/platform.ts';

const cw = mockClient(CloudWatchClient);
const registry = new JobRegistry([
  defineJob({
    type: 'report.quick',
    description: 'expected under a minute',
    parse: () => ({}),
    run: async () => null,
    expectedMaxSeconds: 60,
  }),
  defineJob({ type: 'report.plain', description: 'no expectation of its own', parse: () => ({}), run: async () => null }),
]);
const T = { runningSeconds: 3600, pendingSeconds: 600 };

let p: Platform;
beforeAll(async () => {
  p = await createPlatform({ registry });
});
afterAll(() => p.close());
beforeEach(async () => {
  cw.reset();
  await p.db.pool.query(
    "UPDATE jobs.job SET state = 'cancelled', cancelled_by = 'test reset', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL WHERE state IN ('pending', 'running')",
  );
});

async function running(type: string, opts: { claimedAgo?: string; startedAgo?: string } = {}) {
  const [r] = await p.client.enqueueNow({ type, payload: {} });
  const [c] = await p.store.claim([r!.job.id], 'worker-s', 30);
  if (opts.claimedAgo)
    await p.db.pool.query(`UPDATE jobs.job SET claimed_at = now() - $2::interval WHERE id = $1`, [c!.id, opts.claimedAgo]);
  if (opts.startedAgo)
    await p.db.pool.query(`UPDATE jobs.job SET started_at = now() - $2::interval WHERE id = $1`, [c!.id, opts.startedAgo]);
  return c!;
}
const ids = (xs: { job: { id: string } }[]) => xs.map((x) => x.job.id);

describe('claimed_at', () => {
  it('is stamped by every claim and by nothing else', async () => {
    const [r] = await p.client.enqueueNow({ type: 'report.plain', payload: {} });
    expect((await p.db.pool.query('SELECT claimed_at FROM jobs.job WHERE id = $1', [r!.job.id])).rows[0].claimed_at).toBeNull();
    const [c1] = await p.store.claim([r!.job.id], 'w', 30);
    const first = (await p.db.pool.query('SELECT claimed_at, started_at FROM jobs.job WHERE id = $1', [c1!.id])).rows[0];
    expect(first.claimed_at).toEqual(first.started_at);
    await new Promise((res) => setTimeout(res, 20));
    await p.store.renewLeases([{ id: c1!.id, attempt: 1, progress: { fraction: 0.5 } }], 30);
    expect((await p.db.pool.query('SELECT claimed_at FROM jobs.job WHERE id = $1', [c1!.id])).rows[0].claimed_at).toEqual(first.claimed_at);
    await p.store.fail({ id: c1!.id, attempt: 1 }, { name: 'Error', message: 'x', retryable: true }, 0, false);
    const [c2] = await p.store.claim([r!.job.id], 'w', 30);
    const second = (await p.db.pool.query('SELECT claimed_at, started_at FROM jobs.job WHERE id = $1', [c2!.id])).rows[0];
    expect(c2!.attempt).toBe(2);
    expect(second.claimed_at.getTime()).toBeGreaterThan(first.claimed_at.getTime());
    expect(second.started_at).toEqual(first.started_at);
  });
});

describe('stuck jobs', () => {
  it("running past the type's expected maximum, or past the default for a type without one", async () => {
    const quickStuck = await running('report.quick', { claimedAgo: '2 minutes' });
    const quickFine = await running('report.quick', { claimedAgo: '30 seconds' });
    const plainFine = await running('report.plain', { claimedAgo: '2 minutes' });
    const plainStuck = await running('report.plain', { claimedAgo: '2 hours' });
    const stuck = await findStuckJobs(p.db.pool, registry, T);
    expect(ids(stuck).sort()).toEqual([quickStuck.id, plainStuck.id].sort());
    const quick = stuck.find((s) => s.job.id === quickStuck.id)!;
    expect(quick).toMatchObject({ reason: 'running-too-long', limitSeconds: 60, limitFromType: true });
    expect(quick.stuckForSeconds).toBeGreaterThanOrEqual(119);
    expect(describeStuck(quick)).toMatch(/^running attempt 1 for 2 min \d+ s, over the type's expected maximum of 1 min 0 s$/);
    expect(stuck.find((s) => s.job.id === plainStuck.id)).toMatchObject({ limitSeconds: 3600, limitFromType: false });
    expect(ids(stuck)).not.toContain(quickFine.id);
    expect(ids(stuck)).not.toContain(plainFine.id);
  });

  it('a retried job is judged by its current attempt, not by when it first started', async () => {
    const retried = await running('report.quick', { startedAgo: '3 hours' });
    expect(ids(await findStuckJobs(p.db.pool, registry, T))).not.toContain(retried.id);
  });

  it('pending and due for longer than the threshold, or running on a lease nobody reclaimed; a job not yet due is not stuck', async () => {
    const [due] = await p.client.enqueueNow({ type: 'report.plain', payload: {} });
    await p.db.pool.query("UPDATE jobs.job SET run_after = now() - interval '20 minutes' WHERE id = $1", [due!.job.id]);
    const [fresh] = await p.client.enqueueNow({ type: 'report.plain', payload: {} });
    const [later] = await p.client.enqueueNow({ type: 'report.plain', payload: {}, runAt: new Date(Date.now() + 3_600_000) });
    const orphan = await running('report.plain');
    await p.db.pool.query("UPDATE jobs.job SET lease_expires_at = now() - interval '15 minutes' WHERE id = $1", [orphan.id]);
    const stuck = await findStuckJobs(p.db.pool, registry, T);
    expect(stuck.find((s) => s.job.id === due!.job.id)).toMatchObject({ reason: 'pending-too-long', limitSeconds: 600 });
    // Against the limit of its reason (the pending one, 10 min), not the running one (review: "limit 1 h 0 min" read as not over it yet).
    expect(stuck.find((s) => s.job.id === orphan.id)).toMatchObject({ reason: 'lease-expired', limitSeconds: 600 });
    expect(describeStuck(stuck.find((s) => s.job.id === orphan.id)!)).toMatch(
      /lease that expired 15 min \d+ s ago and nobody reclaimed it \(limit 10 min 0 s\)/,
    );
    expect(ids(stuck)).not.toContain(fresh!.job.id);
    expect(ids(stuck)).not.toContain(later!.job.id);
    expect(await countStuckJobs(p.db.pool, registry, T)).toEqual({
      total: 2,
      byReason: { 'running-too-long': 0, 'pending-too-long': 1, 'lease-expired': 1 },
    });
  });

  it('a job blocked behind its key or its type limit waits while something holds them; with nothing holding either, it is stuck', async () => {
    // Review: a month end queues a company's postings behind their key for hours, and every one
    // blocked past the pending threshold paged *jobs stuck* although its key's holder was running.
    const [holder] = await p.client.enqueueNow({ type: 'report.plain', payload: {}, concurrencyKey: 'company-7' });
    const [waiting] = await p.client.enqueueNow({ type: 'report.plain', payload: {}, concurrencyKey: 'company-7' });
    const [slotWaiter] = await p.client.enqueueNow({ type: 'report.quick', payload: {} });
    const [slotHolder] = await p.client.enqueueNow({ type: 'report.quick', payload: {} });
    const block =
      "UPDATE jobs.job SET blocked_since = now() - interval '20 minutes', run_after = now() - interval '20 minutes' WHERE id = $1";
    await p.db.pool.query(block, [waiting!.job.id]);
    await p.db.pool.query(block, [slotWaiter!.job.id]);
    await p.db.pool.query(
      "UPDATE jobs.job SET state = 'running', type_slot = true, lease_owner = 'worker-s', lease_expires_at = now() + interval '30 seconds', claimed_at = now() WHERE id = $1",
      [slotHolder!.job.id],
    );
    expect(ids(await findStuckJobs(p.db.pool, registry, T))).toEqual([]);
    // The holders end and no wake comes (a lost wake): now they are stuck.
    await p.db.pool.query(
      "UPDATE jobs.job SET state = 'succeeded', finished_at = now(), type_slot = false, lease_owner = NULL, lease_expires_at = NULL WHERE id = ANY($1)",
      [[holder!.job.id, slotHolder!.job.id]],
    );
    const stuck = await findStuckJobs(p.db.pool, registry, T);
    expect(ids(stuck).sort()).toEqual([waiting!.job.id, slotWaiter!.job.id].sort());
    expect(stuck.every((s) => s.reason === 'pending-too-long')).toBe(true);
  });

  it('reads its thresholds from JOBS_STUCK_*, refusing a bad value by name', () => {
    expect(stuckThresholdsFromEnv({})).toEqual({ runningSeconds: 3600, pendingSeconds: 900 });
    expect(stuckThresholdsFromEnv({ JOBS_STUCK_RUNNING_SECONDS: '7200', JOBS_STUCK_PENDING_SECONDS: '60' })).toEqual({
      runningSeconds: 7200,
      pendingSeconds: 60,
    });
    expect(() => stuckThresholdsFromEnv({ JOBS_STUCK_PENDING_SECONDS: 'soon' })).toThrow(
      /JOBS_STUCK_PENDING_SECONDS = "soon" must be a whole number/,
    );
  });
});

describe('the reporter', () => {
  it('publishes the count every check (zero included) as the JobsStuck gauge and logs a stuck job once', async () => {
    cw.on(PutMetricDataCommand).resolves({});
    const { log, lines } = capturingLogger();
    const publish = cloudWatchGauge('ErpJobs/test', log, new CloudWatchClient({ region: 'eu-west-1' }));
    const reporter = new StuckJobReporter({ pool: p.db.pool, registry, thresholds: T, log, publish });
    expect((await reporter.runOnce()).total).toBe(0);
    const stuck = await running('report.quick', { claimedAgo: '5 minutes' });
    expect((await reporter.runOnce()).total).toBe(1);
    expect((await reporter.runOnce()).total).toBe(1);
    const puts = cw.commandCalls(PutMetricDataCommand).map((c) => c.args[0].input);
    expect(puts.map((x) => x.MetricData![0]!.Value)).toEqual([0, 1, 1]);
    expect(puts[0]).toMatchObject({ Namespace: 'ErpJobs/test', MetricData: [{ MetricName: METRIC.jobsStuck, Unit: 'Count' }] });
    const warned = lines.filter((l) => /^job stuck/.test(l.msg));
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ jobId: stuck.id, type: 'report.quick', reason: 'running-too-long', limitSeconds: 60 });
  });

  it('a failing PutMetricData is logged, never thrown', async () => {
    cw.on(PutMetricDataCommand).rejects(new Error('throttled'));
    const { log, lines } = capturingLogger();
    await cloudWatchGauge('ErpJobs/test', log, new CloudWatchClient({ region: 'eu-west-1' }))(3);
    expect(lines.some((l) => /PutMetricData JobsStuck failed/.test(l.msg))).toBe(true);
  });
});
