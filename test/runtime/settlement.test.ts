// The one rule for "what does this job row say about this message" (runtime/domain/settlement.ts),
// as the worker reads it for a delivery it could not claim and as the DLQ reconciliation reads it
// for a dead letter: every row, every reason string.
import { describe, expect, it } from 'vitest';
import { DEAD_JOB_REASONS, judgeDeadLetter, POISON_REASONS, settleMessage, type JobRowView } from '../../runtime/domain/settlement.ts';

const NOW = Date.parse('2026-11-30T12:00:00Z');
const at = (s: number) => new Date(NOW + s * 1000);
const row = (o: Partial<JobRowView>): JobRowView => ({
  id: 'j1',
  state: 'pending',
  attempt: 0,
  releases: 0,
  maxAttempts: 3,
  runAfter: at(0),
  leaseExpiresAt: null,
  leaseOwner: null,
  finishedAt: null,
  cancelledBy: null,
  lastError: null,
  ...o,
});
const HB = 5;

describe('settleMessage: a delivery the worker could not claim', () => {
  it('no job: poison, dead-lettered as unknown-job naming the id', () => {
    expect(settleMessage('j9', undefined, NOW, HB)).toEqual({
      action: 'dead-letter-message',
      reason: 'unknown-job',
      detail: 'no job j9 in the job table',
    });
  });

  it('terminal: a leftover copy, deleted with the state as the reason', () => {
    for (const state of ['succeeded', 'dead', 'cancelled'] as const) {
      expect(settleMessage('j1', row({ state }), NOW, HB)).toEqual({ action: 'delete', why: `job is ${state}`, duplicate: false });
    }
  });

  it('pending and not due: hidden until due, in whole seconds rounded up', () => {
    expect(settleMessage('j1', row({ runAfter: at(41.2) }), NOW, HB)).toEqual({ action: 'hide-until-due', seconds: 42 });
  });

  it('pending and due (another claimer holds the row lock): retry shortly', () => {
    expect(settleMessage('j1', row({ runAfter: at(-3) }), NOW, HB)).toEqual({ action: 'retry-shortly', seconds: 1 });
  });

  it('running with more than a heartbeat of lease: a duplicate of a live lease, deleted', () => {
    expect(settleMessage('j1', row({ state: 'running', attempt: 1, leaseExpiresAt: at(HB + 1), leaseOwner: 'w' }), NOW, HB)).toEqual({
      action: 'delete',
      why: 'duplicate delivery of a job with a live lease',
      duplicate: true,
    });
  });

  it('running with less than a heartbeat left: reclaim just after the lease ends (at least 1 s)', () => {
    expect(settleMessage('j1', row({ state: 'running', attempt: 1, leaseExpiresAt: at(3.4) }), NOW, HB)).toEqual({
      action: 'reclaim-after-lease',
      seconds: 4,
    });
    expect(settleMessage('j1', row({ state: 'running', attempt: 1, leaseExpiresAt: at(0.01) }), NOW, HB)).toEqual({
      action: 'reclaim-after-lease',
      seconds: 1,
    });
  });

  it('running, lease expired, on its final attempt: the job is dead-lettered (releases do not count)', () => {
    const settled = { action: 'dead-letter-job', reason: 'lease-expired-final-attempt', why: 'lease expired on the final attempt' };
    expect(settleMessage('j1', row({ state: 'running', attempt: 3, leaseExpiresAt: at(-1) }), NOW, HB)).toEqual(settled);
    expect(settleMessage('j1', row({ state: 'running', attempt: 3, releases: 1, leaseExpiresAt: at(-1) }), NOW, HB)).toEqual({
      action: 'retry-shortly',
      seconds: 1,
    });
  });

  it('running, lease expired, attempts left: retry shortly, the next claim reclaims it', () => {
    expect(settleMessage('j1', row({ state: 'running', attempt: 1, leaseExpiresAt: at(-1) }), NOW, HB)).toEqual({
      action: 'retry-shortly',
      seconds: 1,
    });
  });
});

describe('judgeDeadLetter: a dead letter, by its job row', () => {
  const now = new Date(NOW);
  it('poison: no job id in the body, or no such job: keep, never resent', () => {
    expect(judgeDeadLetter(null, undefined, now, 'body is not JSON')).toEqual({
      verdict: 'keep',
      why: 'poison: the body names no job (body is not JSON); read it to find the sender, then discard it',
    });
    expect(judgeDeadLetter('j9', undefined, now, 'x')).toEqual({
      verdict: 'keep',
      why: 'poison: no job j9 in the job table; never resent',
    });
  });

  it('succeeded or cancelled: drop', () => {
    expect(judgeDeadLetter('j1', row({ state: 'succeeded', finishedAt: at(-60) }), now, '')).toEqual({
      verdict: 'drop',
      why: 'job succeeded at 2026-11-30T11:59:00.000Z: nothing to run, never re-run',
    });
    expect(judgeDeadLetter('j1', row({ state: 'cancelled', cancelledBy: 'ops' }), now, '')).toEqual({
      verdict: 'drop',
      why: 'job was cancelled by ops: nothing to run',
    });
  });

  it('running: drop under any live lease (even less than a heartbeat), resend once it expired', () => {
    expect(judgeDeadLetter('j1', row({ state: 'running', attempt: 2, leaseOwner: 'w-1', leaseExpiresAt: at(0.5) }), now, '')).toEqual({
      verdict: 'drop',
      why: 'job is running (attempt 2, w-1 holds a live lease): never re-run',
    });
    expect(judgeDeadLetter('j1', row({ state: 'running', attempt: 2, leaseExpiresAt: at(-7) }), now, '')).toEqual({
      verdict: 'resend',
      why: 'job is running with a lease that expired 7 s ago: resent so a worker reclaims it',
    });
  });

  it('pending: resend', () => {
    expect(judgeDeadLetter('j1', row({}), now, '')).toEqual({ verdict: 'resend', why: 'job is pending: resent so a worker claims it' });
  });

  it('dead: keep for a redrive or a discard; discarded: drop', () => {
    expect(judgeDeadLetter('j1', row({ state: 'dead', lastError: { name: 'Error', message: 'boom', retryable: true } }), now, '')).toEqual({
      verdict: 'keep',
      why: 'job is dead (boom): redrive it (jobs dead redrive j1 --reason "<what was fixed>" --by <you>) to run it again, or discard it (jobs dead discard j1 --reason …)',
    });
    // Its payload refused by the handler's schema: a redrive would die the same way.
    const refused = { name: 'ValidationError', message: 'payload.batch: must be a string (got 1)', retryable: false };
    expect(judgeDeadLetter('j1', row({ state: 'dead', lastError: refused }), now, '')).toEqual({
      verdict: 'keep',
      why: 'job is dead (payload.batch: must be a string (got 1)): its payload was refused, and a redrive runs the same payload: enqueue a corrected job (under a new idempotency key if its type keeps keys: this job keeps its own), then discard this one (jobs dead discard j1 --reason "<why>")',
    });
    expect(
      judgeDeadLetter(
        'j1',
        row({ state: 'dead', dead: { discardedAt: at(-1), discardedBy: 'ops', discardReason: 'posted by hand' } }),
        now,
        '',
      ),
    ).toEqual({ verdict: 'drop', why: 'job was discarded by ops: posted by hand' });
  });

  it("dead again since the letter's report (redriven, died again): drop; the report of this death: keep", () => {
    const deadAgain = row({ state: 'dead', finishedAt: at(-60), lastError: { name: 'Error', message: 'boom', retryable: true } });
    expect(judgeDeadLetter('j1', deadAgain, now, '', at(-3600))).toEqual({
      verdict: 'drop',
      why: "an earlier death's report (2026-11-30T11:00:00.000Z): the job was redriven and died again at 2026-11-30T11:59:00.000Z; the newer letter and jobs dead show j1 have that death",
    });
    expect(judgeDeadLetter('j1', deadAgain, now, '', at(-60)).verdict).toBe('keep');
    expect(judgeDeadLetter('j1', deadAgain, now, '', null).verdict).toBe('keep');
  });
});

it('the dead-letter reasons the worker writes, as the DLQ reads them', () => {
  expect([...DEAD_JOB_REASONS].sort()).toEqual(['attempts-exhausted', 'lease-expired-final-attempt', 'non-retryable']);
  expect([...POISON_REASONS].sort()).toEqual(['unknown-job', 'unparseable-body']);
});
