// `jobs show ID --watch` in a real pseudo-terminal (script(1) gives the command a tty), on a job
// that runs for several seconds (forty polls): what the terminal shows at the end is the final
// frame and its closing line, nothing else — no MaxListenersExceededWarning or other stray line breaking the in-place redraw.
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPlatform, type Platform, waitFor } from '../support/platform.ts';

let p: Platform;
beforeAll(async () => {
  p = await createPlatform();
});
afterAll(() => p.close());

/** The screen a terminal would show after `raw`: text, CR/LF, ESC[nF (n lines up) and ESC[0J (clear below). */
function screen(raw: string): string[] {
  const lines: string[] = [''];
  let row = 0;
  let col = 0;
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i]!;
    if (c === '\x1b' && raw[i + 1] === '[') {
      // biome-ignore lint/suspicious/noControlCharactersInRegex: a terminal's escape sequence is what this parses
      const m = /^\x1b\[(\d*)([A-Za-z])/.exec(raw.slice(i));
      if (m) {
        const n = Number(m[1] || '1');
        if (m[2] === 'F') {
          row = Math.max(0, row - n);
          col = 0;
        } else if (m[2] === 'J') {
          lines.length = row + 1;
          lines[row] = lines[row]!.slice(0, col);
        }
        i += m[0].length - 1;
        continue;
      }
    }
    if (c === '\r') col = 0;
    else if (c === '\n') {
      row++;
      col = 0;
      while (lines.length <= row) lines.push('');
    } else {
      const l = lines[row]!;
      lines[row] = l.slice(0, col).padEnd(col) + c + l.slice(col + 1);
      col++;
    }
  }
  while (lines.length > 0 && lines.at(-1) === '') lines.pop();
  return lines;
}

describe('jobs show --watch in a terminal', () => {
  it('redraws in place for the whole run of a several-second job and ends on a clean final frame', async () => {
    const [r] = await p.client.enqueueNow({ type: 'ledger.post', payload: { batch: 'PTY', entries: 1, workMs: 4000 } });
    const command = `${process.execPath} --import tsx bin/jobs.ts show ${r!.job.id} --watch --interval 0.1`;
    const child = spawn('script', ['-qfec', command, '/dev/null'], {
      env: { ...process.env, DATABASE_URL: p.db.url, JOBS_LOCAL_ENV: '0', JOBS_QUEUE_URL: '', COLUMNS: '80', TERM: 'xterm' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let raw = '';
    child.stdout!.on('data', (d: Buffer) => (raw += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (raw += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    // The worker starts once the watch draws (the command's start on a loaded machine took up to
    // 3.6 s of the job's 4: flake review).
    await waitFor(() => (raw.includes('pending') ? true : null), 30_000, 'the watch drawing the pending job');
    p.worker().start();
    const code = await exited;
    expect(code).toBe(0);
    expect(raw).not.toMatch(/Warning/);
    // It did redraw in place (a tty), many times over the run.
    expect(raw.split('\x1b[3F').length).toBeGreaterThan(5);
    const shown = screen(raw);
    // The last frame and the closing line, and nothing else: no stale frame above, no warning.
    expect(shown).toHaveLength(4);
    expect(shown[0]).toBe(`ledger.post ${r!.job.id}`);
    expect(shown[1]).toMatch(/^\[█+\] 100% {2}posted 1 entries$/);
    expect(shown[2]).toMatch(/^succeeded · attempt 1 \(1 of \d+ used\)$/);
    expect(shown[3]).toMatch(/^succeeded after .* on attempt 1 \(1 of \d+ used\): \{"batch":"PTY","posted":1\}$/);
  }, 60_000);

  it("a job blocked by its concurrency key: jobs show's words, wrapped to the terminal's width so the redraw stays in place", async () => {
    const specs = ['PTY-K1', 'PTY-K2'].map((batch) => ({
      type: 'ledger.post',
      payload: { batch, entries: 1 },
      concurrencyKey: 'ledger:company-pty',
    }));
    const [holder, blocked] = (await p.client.enqueueNow(specs)).map((r) => r.job.id);
    expect((await p.store.claimKeyed([holder!, blocked!], 'worker-pty', 60)).blocked).toEqual([blocked]);
    const command = `${process.execPath} --import tsx bin/jobs.ts show ${blocked} --watch --interval 0.1`;
    const child = spawn('script', ['-qfec', command, '/dev/null'], {
      env: { ...process.env, DATABASE_URL: p.db.url, JOBS_LOCAL_ENV: '0', JOBS_QUEUE_URL: '', COLUMNS: '80', TERM: 'xterm' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let raw = '';
    child.stdout!.on('data', (d: Buffer) => (raw += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (raw += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    // Several polls of the blocked job, then it is cancelled: the watch ends.
    for (let i = 0; i < 100 && raw.split('\x1b[').length < 6; i++) await new Promise((r) => setTimeout(r, 100));
    const blockedScreen = screen(raw);
    await p.store.cancel(blocked!, 'ops');
    expect(await exited).toBe(1);

    // The pseudo-terminal reports no width: 80 columns are assumed, and no line is wider.
    expect(blockedScreen.filter((l) => [...l].length > 79)).toEqual([]);
    expect(blockedScreen[0]).toBe(`ledger.post ${blocked}`);
    expect(blockedScreen.slice(2).join(' ')).toMatch(
      new RegExp(
        `^pending · attempt 0 \\(0 of \\d+ used\\) · waiting for key ledger:company-pty since \\S+, held by job ${holder} \\(starts when the key has room\\)$`,
      ),
    );
    // Redrawn in place: the final frame and the closing line, no stale blocked line above or below.
    const shown = screen(raw);
    expect(shown).toHaveLength(4);
    expect(shown[2]).toMatch(/^cancelled · attempt 0 \(0 of \d+ used\)$/);
    expect(shown[3]).toMatch(/^cancelled by ops after /);
    await p.store.cancel(holder!, 'cleanup');
  }, 60_000);
});
