// The live view in a real headless browser (Debian's chromium, driven by playwright-core) on the
// local stack's real processes: the page loads and lists the workers, then a person's clicks
// inject faults and the page shows what the platform did about each — the duplicate ignored, the
// killed worker's job reclaimed, the paused worker's writes refused when it wakes up. A
// screenshot is kept in test-artifacts/live-view.png.
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalStack, type LocalStack } from '../../dev/stack.ts';

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

    // kill -9 of the busiest worker: its jobs are reclaimed by the other with the next attempt.
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
});
