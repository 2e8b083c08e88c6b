// ECS task scale-in protection (issue 11, part 3): protection is renewed before its window ends
// for as long as the worker holds jobs, dropped when it goes idle, and an agent endpoint that
// fails for a while costs nothing once it answers again. The agent is a local HTTP server; the
// two-hour job runs on fake timers with the production window (60 minutes).
import { hostname } from 'node:os';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { startLocalSqs, type LocalSqs } from '../../dev/fauxqs.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { SqsQueue } from '../../runtime/queue/sqs.ts';
import { JobClient } from '../../runtime/store/client.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { startWorkerService, type RunningWorker } from '../../runtime/apps/worker.ts';
import { defaultWorkerId, ecsTaskId } from '../../runtime/apps/ecs-task.ts';
import { TaskProtection } from '../../runtime/worker/task-protection.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { type AgentCall, fakeAgent, fakeMetadata, TASK_ID, taskArn } from '../support/ecs-fakes.ts';
import { waitFor } from '../support/platform.ts';
import { localWorkerEnv } from '../support/worker-service.ts';

function capturingLogger() {
  const lines: { level: number; msg: string }[] = [];
  const log = pino({ level: 'debug' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  return { log, warnings: () => lines.filter((l) => l.level === 40) };
}

describe("the worker's id in ECS", () => {
  it("is the task's id from the metadata endpoint; outside ECS, or when the endpoint fails or hangs, the host's", async () => {
    const ok = await fakeMetadata(() => taskArn);
    const failing = await fakeMetadata(() => ({ status: 500, body: '{}' }));
    const hanging = await fakeMetadata(() => 'hang');
    try {
      expect(await ecsTaskId({ ECS_CONTAINER_METADATA_URI_V4: ok.uri })).toBe(TASK_ID);
      expect(defaultWorkerId(TASK_ID)).toMatch(new RegExp(`^${TASK_ID}-[0-9a-f]{6}$`));
      expect(await ecsTaskId({})).toBeUndefined();
      expect(await ecsTaskId({ ECS_CONTAINER_METADATA_URI_V4: failing.uri })).toBeUndefined();
      expect(await ecsTaskId({ ECS_CONTAINER_METADATA_URI_V4: hanging.uri }, fetch, 200)).toBeUndefined();
      expect(defaultWorkerId(undefined)).toMatch(new RegExp(`^${hostname()}-${process.pid}-[0-9a-f]{6}$`));
    } finally {
      await Promise.all([ok.close(), failing.close(), hanging.close()]);
    }
  });
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const enables = (calls: AgentCall[]) => calls.filter((c) => c.body.ProtectionEnabled);
const disables = (calls: AgentCall[]) => calls.filter((c) => !c.body.ProtectionEnabled);

describe('task protection against a fake ECS agent (node:http on 127.0.0.1)', () => {
  let agent: Awaited<ReturnType<typeof fakeAgent>>;
  beforeAll(async () => {
    agent = await fakeAgent();
  });
  afterEach(() => {
    agent.calls.length = 0;
    agent.status.next = () => 200;
  });
  afterAll(() => agent.close());

  it('busy: renews on its own timer, with PUT {ProtectionEnabled:true, ExpiresInMinutes}; idle: disabled after the grace, then silent', async () => {
    const tp = new TaskProtection(agent.uri, silentLogger, { expiresInMinutes: 60, idleGraceMs: 150, renewEveryMs: 80, retryMs: 40 });
    tp.onBusyChange(true);
    // The worker reports only the edge; every later PUT is the renewal timer's.
    await waitFor(() => enables(agent.calls).length >= 4, 5000, 'four protection PUTs while busy');
    for (const c of agent.calls) {
      expect(c).toMatchObject({
        method: 'PUT',
        path: '/task-protection/v1/state',
        body: { ProtectionEnabled: true, ExpiresInMinutes: 60 },
      });
    }
    expect(tp.protectedUntilMs).toBeGreaterThan(Date.now() + 59 * 60_000);

    const idleAt = Date.now();
    tp.onBusyChange(false);
    await waitFor(() => disables(agent.calls).length === 1, 5000, 'protection dropped');
    const disabled = disables(agent.calls)[0]!;
    expect(disabled.body).toEqual({ ProtectionEnabled: false });
    expect(disabled.at - idleAt).toBeGreaterThanOrEqual(140);
    await waitFor(() => tp.protectedUntilMs === 0, 2000, 'protection recorded as dropped');
    const count = agent.calls.length;
    await sleep(400); // five renewal periods
    expect(agent.calls.length, 'no renewal after the worker went idle').toBe(count);
    expect(agent.calls.at(-1)).toBe(disabled);

    await tp.release();
    expect(disables(agent.calls)).toHaveLength(2); // release always drops (idempotent at the agent)
  });

  it('busy again within the grace keeps protection without a disable in between', async () => {
    const tp = new TaskProtection(agent.uri, silentLogger, { expiresInMinutes: 60, idleGraceMs: 200, renewEveryMs: 100, retryMs: 50 });
    tp.onBusyChange(true);
    await waitFor(() => agent.calls.length >= 1, 2000, 'first PUT');
    tp.onBusyChange(false);
    await sleep(50);
    tp.onBusyChange(true);
    await waitFor(() => enables(agent.calls).length >= 4, 5000, 'renewals continue');
    expect(disables(agent.calls)).toHaveLength(0);
    await tp.release();
    expect(agent.calls.at(-1)!.body).toEqual({ ProtectionEnabled: false });
    const count = agent.calls.length;
    await sleep(300);
    expect(agent.calls.length, 'release() stops the renewal timer').toBe(count);
    tp.onBusyChange(true);
    await sleep(100);
    expect(agent.calls.length, 'nothing is enabled after release()').toBe(count);
  });

  it('the endpoint failing (500) for a while: warnings, retried sooner than the renewal period, protected again once it answers', async () => {
    const { log, warnings } = capturingLogger();
    const tp = new TaskProtection(agent.uri, log, { expiresInMinutes: 60, idleGraceMs: 100, renewEveryMs: 300, retryMs: 30 });
    tp.onBusyChange(true);
    await waitFor(() => agent.calls.some((c) => c.status === 200), 2000, 'first grant');
    const firstGrant = tp.protectedUntilMs;
    let failures = 0;
    agent.status.next = () => (failures++ < 5 ? 500 : 200);
    const failingFrom = Date.now();
    await waitFor(
      () => agent.calls.filter((c) => c.status === 500).length === 5 && agent.calls.at(-1)!.status === 200,
      5000,
      'five failures then success',
    );
    const failed = agent.calls.filter((c) => c.status === 500);
    // The retries run at retryMs, not at the 300 ms renewal period.
    expect(failed.at(-1)!.at - failed[0]!.at).toBeLessThan(4 * 300);
    expect(agent.calls.at(-1)!.body).toEqual({ ProtectionEnabled: true, ExpiresInMinutes: 60 });
    // (The server records a call before the client has read its answer.)
    await waitFor(() => tp.protectedUntilMs > firstGrant, 2000, 'the renewed grant recorded');
    expect(tp.protectedUntilMs).toBeGreaterThanOrEqual(failingFrom + 60 * 60_000);
    expect(warnings().length).toBeGreaterThanOrEqual(5);
    expect(warnings()[0]!.msg).toMatch(/could not renew task scale-in protection; the last grant holds until .*; retrying in 30 ms/);
    // Back on the normal period after the recovery.
    const n = agent.calls.length;
    await sleep(150);
    expect(agent.calls.length).toBe(n);
    await tp.release();
  });

  it('the endpoint unreachable: nothing throws, the worker is told nothing', async () => {
    const { log, warnings } = capturingLogger();
    const tp = new TaskProtection('http://127.0.0.1:1', log, { expiresInMinutes: 60, idleGraceMs: 50, renewEveryMs: 100, retryMs: 20 });
    tp.onBusyChange(true);
    await waitFor(() => warnings().length >= 3, 5000, 'retried warnings');
    expect(warnings()[0]!.msg).toMatch(/the task is not protected/);
    await expect(tp.release()).resolves.toBeUndefined();
  });

  it('outside ECS (no ECS_AGENT_URI) it does nothing', async () => {
    const fetchFn = vi.fn<typeof fetch>();
    const tp = new TaskProtection(undefined, silentLogger, { expiresInMinutes: 60, idleGraceMs: 1 }, fetchFn);
    tp.onBusyChange(true);
    tp.onBusyChange(false);
    await tp.release();
    expect(tp.enabled).toBe(false);
    expect(fetchFn).not.toHaveBeenCalled();
  });
});

describe('a two-hour job keeps its task protection (fake timers, the 60-minute window)', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  /** A fetch that records the fake clock's time of each PUT and answers as `answer` says. */
  function fakeFetch(answer: (at: number) => number) {
    const calls: { at: number; enabled: boolean; status: number }[] = [];
    const fn = (async (_url: string | URL | Request, init?: RequestInit) => {
      const body = JSON.parse(String(init?.body)) as { ProtectionEnabled: boolean; ExpiresInMinutes?: number };
      const at = Date.now();
      const status = answer(at);
      calls.push({ at, enabled: body.ProtectionEnabled, status });
      return new Response(status === 200 ? '{}' : 'agent error', { status });
    }) as typeof fetch;
    return { fn, calls };
  }

  /** Every instant of [from, to] was covered by a successful grant of `windowMs`. */
  function assertCovered(calls: { at: number; enabled: boolean; status: number }[], from: number, to: number, windowMs: number) {
    const grants = calls.filter((c) => c.enabled && c.status === 200).map((c) => c.at);
    expect(grants[0]).toBe(from);
    for (let i = 1; i < grants.length; i++) {
      expect(grants[i]!, `renewal ${i} at +${(grants[i]! - from) / 60_000} min came after the previous grant expired`).toBeLessThan(
        grants[i - 1]! + windowMs,
      );
    }
    expect(grants.at(-1)! + windowMs).toBeGreaterThan(to);
  }

  it('busy for 2 h of fake time: renewed every 50 min, each renewal before the previous expiry; dropped 5 s after idle', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
    const { fn, calls } = fakeFetch(() => 200);
    const tp = new TaskProtection('http://agent.invalid', silentLogger, undefined, fn);
    const start = Date.now();
    tp.onBusyChange(true);
    await vi.advanceTimersByTimeAsync(2 * 3600_000);
    const end = Date.now();
    tp.onBusyChange(false);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(calls.map((c) => [(c.at - start) / 60_000, c.enabled])).toEqual([
      [0, true],
      [50, true],
      [100, true],
      [120 + 5_000 / 60_000, false],
    ]);
    assertCovered(calls, start, end, 60 * 60_000);
    // Idle: no renewals, ever.
    await vi.advanceTimersByTimeAsync(3 * 3600_000);
    expect(calls).toHaveLength(4);
  });

  it('the agent failing for 8 minutes at a renewal: retried every 30 s, protection never lapses', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
    const t0 = Date.now();
    const { fn, calls } = fakeFetch((at) => (at - t0 >= 50 * 60_000 && at - t0 < 58 * 60_000 ? 500 : 200));
    const tp = new TaskProtection('http://agent.invalid', silentLogger, undefined, fn);
    tp.onBusyChange(true);
    await vi.advanceTimersByTimeAsync(2 * 3600_000);
    const failed = calls.filter((c) => c.status === 500);
    expect(failed.length).toBe(16); // 50:00 … 57:30, every 30 s
    assertCovered(calls, t0, Date.now(), 60 * 60_000);
    await tp.release();
  });
});

describe('through the worker service (startWorkerService reads ECS_AGENT_URI and ECS_CONTAINER_METADATA_URI_V4)', () => {
  let db: TestDb;
  let sqs: LocalSqs;
  let agent: Awaited<ReturnType<typeof fakeAgent>>;
  let metadata: Awaited<ReturnType<typeof fakeMetadata>>;
  let svc: RunningWorker | null = null;
  const timings = { visibilityTimeoutSeconds: 6, maxReceiveCount: 10 };
  beforeAll(async () => {
    [db, sqs, agent, metadata] = await Promise.all([
      createTestDb(),
      startLocalSqs({ timings, prefix: 'task-protection' }),
      fakeAgent(),
      fakeMetadata(() => taskArn),
    ]);
  });
  afterAll(async () => {
    await svc?.shutdown('test over');
    await Promise.all([sqs.stop(), agent.close(), metadata.close(), db.drop()]);
  });

  it('a job running protects the task, and its owner names the task; shutdown drops the protection', async () => {
    let finish!: () => void;
    const gate = new Promise<void>((r) => (finish = r));
    const registry = new JobRegistry([
      defineJob<Record<string, never>, null>({
        type: 'test.hold',
        description: 'runs until the test lets it finish',
        parse: () => ({}),
        async run() {
          await gate;
          return null;
        },
      }),
    ]);
    svc = await startWorkerService(
      localWorkerEnv(db, sqs, { ECS_AGENT_URI: agent.uri, ECS_CONTAINER_METADATA_URI_V4: metadata.uri }),
      registry,
    );
    expect(agent.calls, 'an idle worker asks for nothing').toHaveLength(0);
    const queue = new SqsQueue({ queueUrl: sqs.queueUrl, endpoint: sqs.endpoint });
    const client = new JobClient({
      pool: db.pool,
      registry,
      publisher: new Publisher(db.pool, queue, silentLogger),
      defaultMaxAttempts: 3,
    });
    const [r] = await client.enqueueNow({ type: 'test.hold', payload: {} });
    await waitFor(() => agent.calls.length >= 1, 10_000, 'protection enabled while the job runs');
    expect(agent.calls[0]).toMatchObject({
      method: 'PUT',
      path: '/task-protection/v1/state',
      body: { ProtectionEnabled: true, ExpiresInMinutes: 60 },
    });
    // The job's owner names the ECS task (its id first), the one on-call would stop.
    const running = (await client.store.get(r!.job.id))!;
    expect(running.state).toBe('running');
    expect(running.leaseOwner).toMatch(new RegExp(`^${TASK_ID}-[0-9a-f]{6}$`));
    finish();
    await waitFor(async () => (await client.store.get(r!.job.id))!.state === 'succeeded', 10_000, 'job succeeded');
    await svc.shutdown('test');
    svc = null;
    expect(agent.calls.at(-1)!.body).toEqual({ ProtectionEnabled: false });
    expect(enables(agent.calls)).toHaveLength(1);
  });
});
