// The live view in a real headless browser (Debian's chromium, driven by playwright-core) on the
// local stack's real processes: the page loads and lists the workers, then a person's clicks
// inject faults and the page shows what the platform did about each — the duplicate ignored, the
// killed worker's job reclaimed, the paused worker's writes refused when it wakes up; a cancel
// shows with who asked, and a job on its last attempt says that its next failure dead-letters.
// Then the page at 1,400, 900 and 390 px wide: every button (the fault controls and each worker's
// kill and pause) is inside the viewport and is what a click at its centre hits, no tile label or
// progress or event text is cut, and nothing scrolls sideways. Screenshots are kept in
// test-artifacts/ (live-view.png, then live-view-1400.png, -900.png, -390.png).
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalStack, type LocalStack } from '../../dev/stack.ts';

// The functions given to page.evaluate run in the browser; the project compiles without the DOM's types.
declare const document: any;

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const ARTIFACTS = join(process.cwd(), 'test-artifacts');
// CI installs chromium (.ci/run); a developer machine without it skips, saying so.
const run = existsSync(CHROMIUM) || process.env.CI ? describe : describe.skip;
if (!existsSync(CHROMIUM) && !process.env.CI)
  process.stderr.write(`browser test skipped: no chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)\n`);

run('live view in a browser', () => {
  let stack: LocalStack;
  let dir: string;
  let browser: Browser;
  let page: Page;
  const pageErrors: string[] = [];

  beforeAll(async () => {
    stack = await startLocalStack({
      workers: 2,
      dir: (dir = await mkdtemp(join(tmpdir(), 'jobs-live-'))),
      timings: {
        leaseSeconds: 3,
        heartbeatSeconds: 1,
        visibilityTimeoutSeconds: 4,
        maxAttempts: 4,
        backoffBaseSeconds: 0.5,
        backoffMaxSeconds: 1,
        drainSeconds: 1,
      },
      log: () => undefined,
      env: { LOG_LEVEL: 'silent', NODE_NO_WARNINGS: '1' },
    });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    page = await browser.newPage({ viewport: { width: 1440, height: 1050 } });
    page.on('pageerror', (e) => pageErrors.push(e.message));
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await stack?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  const feedItem = (selector: string) => page.locator(`#feed li${selector}`).first();
  const api = async (path: string, body: unknown) => {
    const r = await fetch(`${stack.apiUrl}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(r.status, `POST ${path}`).toBeLessThan(300);
    return (await r.json()) as { id: string };
  };

  /**
   * What a person at this width can reach: each element matching `selector`, scrolled into view,
   * lies inside the viewport and is what a click at its centre would hit. Measured in one go in
   * the page (it redraws every second). Returns how many there were and what was wrong with any.
   */
  const reachable = (selector: string) =>
    page.evaluate((sel) => {
      const problems: string[] = [];
      const list: any[] = [...document.querySelectorAll(sel)];
      const vw = document.documentElement.clientWidth;
      const vh = document.documentElement.clientHeight;
      for (const b of list) {
        b.scrollIntoView({ block: 'center', inline: 'nearest' });
        const r = b.getBoundingClientRect();
        const name = `${sel} "${(b.textContent ?? '').trim().slice(0, 40)}"`;
        if (r.width < 10 || r.height < 10) problems.push(`${name} is ${r.width}×${r.height} px`);
        else if (r.left < 0 || r.top < 0 || r.right > vw + 0.5 || r.bottom > vh + 0.5)
          problems.push(
            `${name} at ${Math.round(r.left)},${Math.round(r.top)}–${Math.round(r.right)},${Math.round(r.bottom)} outside ${vw}×${vh}`,
          );
        else {
          const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
          if (!hit || !b.contains(hit))
            problems.push(`${name}: a click at its centre hits ${hit ? `${hit.tagName}.${hit.className}` : 'nothing'}`);
        }
      }
      return { count: list.length, problems };
    }, selector);

  /** Texts shown cut (ellipsis or clipped) among `selector`: their scroll width exceeds their box. */
  const cutTexts = (selector: string) =>
    page.evaluate(
      (sel) =>
        [...(document.querySelectorAll(sel) as any[])]
          .filter((e) => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
          .map((e) => `${sel} "${(e.textContent ?? '').slice(0, 40)}" (${e.scrollWidth} > ${e.clientWidth} px)`),
      selector,
    );

  it('shows the workers, then each injected fault and what the platform did about it', { timeout: 120_000 }, async () => {
    await page.goto(`${stack.apiUrl}/`);
    await expect.poll(() => page.locator('#stream-status').textContent(), { timeout: 10_000 }).toBe('live');
    await expect.poll(() => page.locator('#workers tr').count(), { timeout: 20_000 }).toBe(2);
    await expect.poll(() => page.locator('#workers .chip.alive').count(), { timeout: 10_000 }).toBe(2);
    expect(await page.locator('#faults').isVisible()).toBe(true);
    expect(await page.locator('#n-dlq').textContent()).toBe('0');

    // Work to watch: leases appear with an owner, an attempt and a countdown.
    await page.click('button[data-fault="enqueue"]');
    await expect.poll(() => page.locator('#leases tr').count(), { timeout: 15_000 }).toBeGreaterThanOrEqual(4);
    expect(await page.locator('#leases tr .countdown').first().textContent()).toMatch(/^\d\.\d s$/);
    await feedItem('[data-kind="claimed"]').waitFor({ timeout: 5000 });

    // A duplicate delivery while a worker holds the job: another worker sees the live lease and ignores it.
    await page.click('button[data-fault="duplicate"]');
    await feedItem('[data-fault="duplicate"]').waitFor({ timeout: 10_000 });
    await feedItem('[data-kind="duplicate-ignored"]').waitFor({ timeout: 15_000 });

    // kill -9 of the busiest worker: its jobs are reclaimed by the other with the next attempt
    // (a lease still held first: with none, the kill takes a worker that holds nothing: flake review).
    await expect.poll(() => page.locator('#leases tr').count(), { timeout: 15_000 }).toBeGreaterThanOrEqual(1);
    await page.click('button[data-fault="kill"]');
    await feedItem('[data-fault="kill"]').waitFor({ timeout: 10_000 });
    await feedItem('[data-kind="reclaimed"]').waitFor({ timeout: 20_000 });
    await feedItem('[data-fault="restart"]').waitFor({ timeout: 10_000 });

    // A worker paused past its lease wakes up as a zombie: its heartbeat is refused (lease lost).
    await page.click('button[data-fault="enqueue"]');
    await expect.poll(() => page.locator('#leases tr').count(), { timeout: 15_000 }).toBeGreaterThanOrEqual(3);
    await expect.poll(() => page.locator('#workers .chip.alive').count(), { timeout: 20_000 }).toBe(2);
    await page.click('button[data-fault="pause"]');
    await feedItem('[data-fault="pause"]').waitFor({ timeout: 10_000 });
    await expect.poll(() => page.locator('#workers .chip.paused').count(), { timeout: 5000 }).toBe(1);
    await feedItem('[data-kind="lease-lost"]').waitFor({ timeout: 20_000 });

    // Enqueue-and-rollback: the fault is shown; the job it returned never appears anywhere.
    await page.click('button[data-fault="rollback"]');
    await feedItem('[data-fault="rollback"]').waitFor({ timeout: 10_000 });

    await mkdir(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'live-view.png'), fullPage: true });
    expect(pageErrors).toEqual([]);
  });

  it('shows a cancel with who asked, and warns on a job at its last attempt that a fault click would dead-letter it', {
    timeout: 60_000,
  }, async () => {
    const last = await api('/v1/jobs', { type: 'ledger.post', payload: { batch: 'LAST-1', entries: 1, workMs: 20_000 }, maxAttempts: 1 });
    const lease = page.locator(`#leases tr[data-job="${last.id}"]`);
    await lease.waitFor({ timeout: 15_000 });
    expect(await lease.locator('.cap').textContent()).toBe('attempt 1 of 1 — next failure dead-letters');
    expect(await lease.locator('td.attempt').textContent()).toMatch(/^1 \(1 of 1 used\)/);
    expect(await page.locator('#fault-note').textContent()).toMatch(/Fault clicks spend attempts\..*cap is 4 attempts/s);

    await api(`/v1/jobs/${last.id}/cancel`, { by: 'browser-test' });
    const item = feedItem(`[data-kind="cancelled"][data-job="${last.id}"]`);
    await item.waitFor({ timeout: 10_000 });
    expect(await item.textContent()).toMatch(/cancelled.*ledger\.post.*by browser-test \(api, /);
    await expect.poll(() => page.locator(`#recent tr`).filter({ hasText: 'cancelled by browser-test' }).count(), { timeout: 5000 }).toBe(1);
  });

  it.each([
    [1400, 1000],
    [900, 1000],
    [390, 844],
  ])(
    'is usable at %i px: every button reachable and clickable, no label or text cut, no sideways scroll',
    { timeout: 60_000 },
    async (width, height) => {
      // Something running, with progress, so the leases and the progress texts are on screen.
      await api('/v1/jobs', { type: 'ledger.post', payload: { batch: `W-${width}`, entries: 1, workMs: 15_000 } });
      await page.setViewportSize({ width, height });
      await expect.poll(() => page.locator('#workers td.actions button').count(), { timeout: 20_000 }).toBe(4);
      await expect.poll(() => page.locator('#leases td.fill').count(), { timeout: 15_000 }).toBeGreaterThan(0);

      // The picture first: a failed check below still leaves what the page looked like.
      await page.evaluate(() => document.scrollingElement.scrollTo(0, 0));
      await page.screenshot({ path: join(ARTIFACTS, `live-view-${width}.png`), fullPage: true });
      const faults = await reachable('#faults button[data-fault]');
      expect(faults.count).toBe(9);
      expect(faults.problems).toEqual([]);
      const perWorker = await reachable('#workers td.actions button');
      expect(perWorker.count).toBe(4);
      expect(perWorker.problems).toEqual([]);

      expect(await cutTexts('.tile .l')).toEqual([]);
      expect(await cutTexts('#feed li .d')).toEqual([]);
      expect(await cutTexts('#leases td.fill, #recent td.fill')).toEqual([]);
      expect(await cutTexts('#fault-note')).toEqual([]);
      expect(await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth)).toBeLessThanOrEqual(0);

      expect(pageErrors).toEqual([]);
    },
  );
});
