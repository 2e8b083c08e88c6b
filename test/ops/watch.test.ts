// `jobs show --watch` rendering: the bar, the lease countdown by the database's clock, one line per
// change when piped, an in-place redraw on a terminal, and the exit code by how the job ended.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rowToOpsJob, runOps } from '../../runtime/oncall/db.ts';
import { progressBar, renderEnd, renderFrame, renderLine, statusText, watchJob, type WatchFrame } from '../../runtime/oncall/watch.ts';
import { createPlatform, type Platform } from '../support/platform.ts';

let p: Platform;
beforeAll(async () => {
  p = await createPlatform();
});
afterAll(() => p.close());

async function frame(id: string): Promise<WatchFrame> {
  const { rows } = await runOps(p.db.pool, 'jobGetWithNow', [id]);
  return { job: rowToOpsJob(rows[0]!), dbNow: rows[0]!.db_now as Date };
}

describe('rendering', () => {
  it('a bar of the fraction, clamped, unicode on a terminal and ASCII when piped', () => {
    expect(progressBar(0.5, 10, true)).toBe('[#####-----]');
    expect(progressBar(0.5, 10, false)).toBe('[█████░░░░░]');
    expect(progressBar(1.7, 4, true)).toBe('[####]');
    expect(progressBar(Number.NaN, 4, true)).toBe('[----]');
  });

  it('a running job: attempt, lease owner and the time left on the lease by the database clock, progress message', async () => {
    const [r] = await p.client.enqueueNow({ type: 'ledger.post', payload: { batch: 'W', entries: 1 } });
    await p.store.claim([r!.job.id], 'worker-w', 30);
    await p.store.renewLeases([{ id: r!.job.id, attempt: 1, progress: { fraction: 0.42, message: 'posting lines 420/1000' } }], 12.5);
    const f = await frame(r!.job.id);
    expect(statusText(f)).toMatch(/^running · attempt 1 \(1 of \d+ used\) · lease worker-w 12\.\d s left · running for \d+ s$/);
    const [title, bar, status] = renderFrame(f, 20);
    expect(title).toBe(`ledger.post ${r!.job.id}`);
    expect(bar).toBe('[████████░░░░░░░░░░░░]  42%  posting lines 420/1000');
    expect(status).toBe(statusText(f));
    expect(renderLine(f)).toMatch(/^\d\d:\d\d:\d\d {2}\[########------------\] {2}42% {2}running · .* — posting lines 420\/1000$/);
    // Lease already gone by the database clock: say so rather than count below zero.
    await p.db.pool.query("UPDATE jobs.job SET lease_expires_at = statement_timestamp() - interval '3 seconds' WHERE id = $1", [r!.job.id]);
    expect(statusText(await frame(r!.job.id))).toMatch(/lease worker-w expired 3\.\d s ago/);
    await p.store.cancel(r!.job.id, 'cleanup');
  });

  it('a pending job: due in, or waiting for a worker; the end line for each final state', async () => {
    const [later] = await p.client.enqueueNow({
      type: 'ledger.post',
      payload: { batch: 'W2', entries: 1 },
      runAt: new Date(Date.now() + 60_000),
    });
    expect(statusText(await frame(later!.job.id))).toMatch(/^pending · attempt 0 \(0 of \d+ used\) · due in (59|60)\.\d s$/);
    // Two hours ahead: in hours and minutes, not 7,200.0 s.
    const [tonight] = await p.client.enqueueNow({
      type: 'ledger.post',
      payload: { batch: 'W2-TONIGHT', entries: 1 },
      runAt: new Date(Date.now() + 2 * 3_600_000),
    });
    expect(statusText(await frame(tonight!.job.id))).toMatch(/· due in (1 h 59|2 h 0) min$/);
    await p.store.cancel(tonight!.job.id, 'ops');
    await p.store.cancel(later!.job.id, 'ops');
    expect(renderEnd(await frame(later!.job.id))).toMatch(/^cancelled by ops after \d+ s$/);
  });
});

describe('watchJob', () => {
  it('piped: a line per change until the job succeeds, exit 0; the lease ticking down alone prints nothing', async () => {
    const [r] = await p.client.enqueueNow({ type: 'ledger.post', payload: { batch: 'W3', entries: 1, workMs: 600 } });
    const out: string[] = [];
    p.worker().start();
    const code = await watchJob({ pool: p.db.pool, id: r!.job.id, write: (s) => out.push(s), tty: false, intervalMs: 50 });
    expect(code).toBe(0);
    const lines = out.join('').trim().split('\n');
    expect(lines.at(-1)).toMatch(/^succeeded after .* on attempt 1 \(1 of \d+ used\): \{"batch":"W3","posted":1\}$/);
    // Polled every 50 ms for ~600 ms, but only changes are printed: far fewer lines than polls.
    expect(lines.length).toBeLessThan(14);
    expect(new Set(lines).size).toBe(lines.length);
  });

  it('on a terminal: redraws the three lines in place', async () => {
    const [r] = await p.client.enqueueNow({
      type: 'ledger.post',
      payload: { batch: 'W4', entries: 1, failAttempts: 9, workMs: 300 },
      maxAttempts: 1,
    });
    const out: string[] = [];
    const code = await watchJob({ pool: p.db.pool, id: r!.job.id, write: (s) => out.push(s), tty: true, intervalMs: 50, columns: 60 });
    expect(code).toBe(1);
    expect(out.length).toBeGreaterThanOrEqual(4);
    expect(out[0]).not.toContain('\x1b[');
    expect(out.slice(1, -1).every((s) => s.startsWith('\x1b[3F\x1b[0J'))).toBe(true);
    expect(out.at(-1)).toMatch(/^dead after .*: Error: simulated failure of batch W4 on attempt 1/);
  });

  it('a long watch with Ctrl-C armed leaves no listener behind: no MaxListenersExceededWarning in the screen', async () => {
    const [r] = await p.client.enqueueNow({ type: 'ledger.post', payload: { batch: 'W6', entries: 1, workMs: 800 } });
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    try {
      const ac = new AbortController();
      p.worker().start();
      // Polled every 10 ms for about a second: a hundred polls, where ten listeners are enough to warn.
      const code = await watchJob({
        pool: p.db.pool,
        id: r!.job.id,
        write: () => undefined,
        tty: true,
        intervalMs: 10,
        columns: 60,
        signal: ac.signal,
      });
      expect(code).toBe(0);
      await new Promise((res) => setImmediate(res));
      expect(warnings.filter((w) => /MaxListeners/.test(w))).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('stops when aborted (Ctrl-C) with 130, and answers 1 for an unknown job', async () => {
    const [r] = await p.client.enqueueNow({
      type: 'ledger.post',
      payload: { batch: 'W5', entries: 1 },
      runAt: new Date(Date.now() + 60_000),
    });
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 100);
    expect(
      await watchJob({ pool: p.db.pool, id: r!.job.id, write: () => undefined, tty: false, intervalMs: 1000, signal: ac.signal }),
    ).toBe(130);
    const out: string[] = [];
    expect(await watchJob({ pool: p.db.pool, id: '00000000-0000-4000-8000-000000000000', write: (s) => out.push(s), tty: false })).toBe(1);
    expect(out.join('')).toMatch(/no job/);
  });
});
