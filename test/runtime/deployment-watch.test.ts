// A deploy in the middle of a backlog (platform review, session 15): a worker keeps ECS task
// protection while it holds jobs, and ECS honours protection in deployments, so an old task in a
// backlog would hold a rollout until the backlog drained. A task replaced by a newer deployment
// (its service's primary deployment is another one, with all its tasks running) stops taking jobs,
// hands back what it claimed ahead, finishes what it runs, and drops its protection; a SIGTERM
// meanwhile shortens the drain to the usual one. ECS is aws-sdk-client-mock's; the metadata
// endpoint and the agent are local HTTP servers; PostgreSQL and SQS are real (embedded, fauxqs).
import { DescribeServicesCommand, type DescribeServicesCommandOutput, DescribeTasksCommand, ECSClient } from '@aws-sdk/client-ecs';
import { mockClient } from 'aws-sdk-client-mock';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startLocalSqs, type LocalSqs } from '../../dev/fauxqs.ts';
import { ecsDeploymentProbe } from '../../runtime/apps/ecs-task.ts';
import { type RunningWorker, startWorkerService } from '../../runtime/apps/worker.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { SqsQueue } from '../../runtime/queue/sqs.ts';
import { JobClient } from '../../runtime/store/client.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { DeploymentWatch, type DeploymentState, steadilySuperseded, superseded } from '../../runtime/worker/deployment-watch.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { fakeAgent, fakeMetadata, TASK_ID } from '../support/ecs-fakes.ts';
import { waitFor } from '../support/platform.ts';
import { localWorkerEnv } from '../support/worker-service.ts';

const CLUSTER = 'arn:aws:ecs:eu-west-1:123456789012:cluster/ErpJobs-prod';
const TASK_ARN = `arn:aws:ecs:eu-west-1:123456789012:task/ErpJobs-prod/${TASK_ID}`;
const SERVICE = 'ErpJobs-prod-Services-WorkerService1A2B3C';
const OLD = 'ecs-svc/1111111111111111111';
const NEW = 'ecs-svc/2222222222222222222';

// One mock of ECSClient for the file: every client made meanwhile (the worker service's too) answers from it.
const ecs = mockClient(ECSClient);
afterAll(() => ecs.restore());

const state = (primary: string, running: number, desired: number): DeploymentState => ({
  own: OLD,
  primary,
  primaryRunning: running,
  primaryDesired: desired,
});

describe('when a task counts as replaced', () => {
  it('only once a newer deployment is primary and all of its tasks run (a crashing new image retires nothing)', () => {
    expect(superseded(state(OLD, 4, 4))).toBe(false); // its own deployment, e.g. a scale-out
    expect(superseded(state(NEW, 0, 4))).toBe(false);
    expect(superseded(state(NEW, 3, 4))).toBe(false);
    expect(superseded(state(NEW, 4, 4))).toBe(true);
    expect(superseded(state(NEW, 0, 0))).toBe(false);
  });

  it('retires on two reads in a row, by the same deployment, its launch failures not growing and its rollout not failed (review finding: one snapshot of a new image whose tasks then crashed retired every old task for good)', () => {
    const failed = (s: DeploymentState, n: number): DeploymentState => ({ ...s, primaryFailed: n });
    expect(steadilySuperseded(null, state(NEW, 4, 4))).toBe(false); // the first read
    expect(steadilySuperseded(state(NEW, 4, 4), state(NEW, 4, 4))).toBe(true);
    expect(steadilySuperseded(state(NEW, 3, 4), state(NEW, 4, 4))).toBe(false);
    expect(steadilySuperseded(failed(state(NEW, 4, 4), 0), failed(state(NEW, 4, 4), 2))).toBe(false); // crashing meanwhile
    expect(steadilySuperseded(failed(state(NEW, 4, 4), 2), failed(state(NEW, 4, 4), 2))).toBe(true); // failures long past
    expect(steadilySuperseded(state(NEW, 4, 4), state('ecs-svc/3333333333333333333', 4, 4))).toBe(false);
    expect(steadilySuperseded(state(NEW, 4, 4), { ...state(NEW, 4, 4), primaryRolloutState: 'FAILED' })).toBe(false); // the circuit breaker gave up
  });

  it('the watch: reads until replaced, then calls back once and stops; ECS failing is logged once per streak and changes nothing', async () => {
    const answers: (DeploymentState | Error)[] = [
      state(OLD, 2, 2),
      new Error('Rate exceeded'),
      new Error('Rate exceeded'),
      state(NEW, 1, 2),
      state(NEW, 2, 2),
      state(NEW, 2, 2),
      state(NEW, 2, 2),
    ];
    const lines: { level: number; msg: string }[] = [];
    const log = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
    const replaced: DeploymentState[] = [];
    let reads = 0;
    const watch = new DeploymentWatch({
      probe: async () => {
        const a = answers[reads++]!;
        if (a instanceof Error) throw a;
        return a;
      },
      log,
      intervalMs: 5,
      onSuperseded: (s) => replaced.push(s),
    });
    watch.start();
    await waitFor(() => replaced.length > 0, 5000, 'replaced');
    await new Promise((r) => setTimeout(r, 50));
    expect(replaced).toEqual([state(NEW, 2, 2)]);
    expect(reads).toBe(6); // the second full read in a row; nothing read after it
    expect(lines.filter((l) => l.level === 40).map((l) => l.msg)).toEqual([
      expect.stringMatching(/^could not read the worker service's deployments from ECS: this task keeps taking jobs/),
    ]);
  });

  it('a task no service deployment started (a one-off run-task) is not watched', async () => {
    const replaced: DeploymentState[] = [];
    let reads = 0;
    const watch = new DeploymentWatch({
      probe: async () => {
        reads++;
        return null;
      },
      log: silentLogger,
      intervalMs: 5,
      onSuperseded: (s) => replaced.push(s),
    });
    watch.start();
    await new Promise((r) => setTimeout(r, 100));
    expect([reads, replaced.length]).toEqual([1, 0]);
  });
});

describe('what ECS is asked (aws-sdk-client-mock)', () => {
  afterEach(() => ecs.reset());

  it("its own deployment from DescribeTasks once (startedBy), its service's primary one from DescribeServices each time", async () => {
    ecs.on(DescribeTasksCommand).resolves({ tasks: [{ taskArn: TASK_ARN, startedBy: OLD, group: `service:${SERVICE}` }] });
    ecs.on(DescribeServicesCommand).resolves({
      services: [
        {
          serviceName: SERVICE,
          deployments: [
            { id: NEW, status: 'PRIMARY', runningCount: 3, desiredCount: 4 },
            { id: OLD, status: 'ACTIVE', runningCount: 4, desiredCount: 4 },
          ],
        },
      ],
    });
    const probe = ecsDeploymentProbe(new ECSClient({ region: 'eu-west-1' }), { taskArn: TASK_ARN, cluster: CLUSTER, taskId: TASK_ID });
    expect(await probe()).toEqual({ own: OLD, primary: NEW, primaryRunning: 3, primaryDesired: 4, primaryFailed: 0 });
    expect(await probe()).toEqual({ own: OLD, primary: NEW, primaryRunning: 3, primaryDesired: 4, primaryFailed: 0 });
    expect(ecs.commandCalls(DescribeTasksCommand)).toHaveLength(1);
    expect(ecs.commandCalls(DescribeTasksCommand)[0]!.args[0].input).toEqual({ cluster: CLUSTER, tasks: [TASK_ARN] });
    expect(ecs.commandCalls(DescribeServicesCommand).map((c) => c.args[0].input)).toEqual([
      { cluster: CLUSTER, services: [SERVICE] },
      { cluster: CLUSTER, services: [SERVICE] },
    ]);
  });

  it('a task started by hand (no ecs-svc/ deployment) has nothing to watch; a task ECS does not know is an error', async () => {
    ecs.on(DescribeTasksCommand).resolves({ tasks: [{ taskArn: TASK_ARN, startedBy: 'oncall-jane', group: 'family:ErpJobsWorker' }] });
    const probe = ecsDeploymentProbe(new ECSClient({ region: 'eu-west-1' }), { taskArn: TASK_ARN, cluster: CLUSTER, taskId: TASK_ID });
    expect(await probe()).toBeNull();
    expect(ecs.commandCalls(DescribeServicesCommand)).toHaveLength(0);
    ecs.reset();
    ecs.on(DescribeTasksCommand).resolves({ tasks: [], failures: [{ arn: TASK_ARN, reason: 'MISSING' }] });
    const lost = ecsDeploymentProbe(new ECSClient({ region: 'eu-west-1' }), { taskArn: TASK_ARN, cluster: CLUSTER, taskId: TASK_ID });
    await expect(lost()).rejects.toThrow(`ECS does not describe task ${TASK_ARN}: MISSING`);
  });
});

describe('a deploy in the middle of a backlog, through the worker service', () => {
  let db: TestDb;
  let sqs: LocalSqs;
  let agent: Awaited<ReturnType<typeof fakeAgent>>;
  let metadata: Awaited<ReturnType<typeof fakeMetadata>>;
  let deployments: DescribeServicesCommandOutput;
  const services: RunningWorker[] = [];
  beforeAll(async () => {
    [db, sqs, agent, metadata] = await Promise.all([
      createTestDb(),
      startLocalSqs({ timings: { visibilityTimeoutSeconds: 6, maxReceiveCount: 10 }, prefix: 'deploy-watch' }),
      fakeAgent(),
      fakeMetadata(() => ({ status: 200, body: JSON.stringify({ TaskARN: TASK_ARN, Cluster: CLUSTER }) })),
    ]);
    ecs.on(DescribeTasksCommand).resolves({ tasks: [{ taskArn: TASK_ARN, startedBy: OLD, group: `service:${SERVICE}` }] });
    ecs.on(DescribeServicesCommand).callsFake(async () => deployments);
  });
  afterAll(async () => {
    for (const s of services) await s.shutdown('test over');
    await Promise.all([sqs.stop(), agent.close(), metadata.close(), db.drop()]);
  });

  const primary = (id: string, running: number, desired: number) => {
    deployments = {
      $metadata: {},
      services: [{ serviceName: SERVICE, deployments: [{ id, status: 'PRIMARY', runningCount: running, desiredCount: desired }] }],
    };
  };

  /** A registry whose `test.hold` runs until `release()`, and whose `test.quick` jobs record where they ran. */
  const registryFor = (ranHere: string[]) => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const registry = new JobRegistry([
      defineJob<Record<string, never>, null>({
        type: 'test.hold',
        description: 'a long job: runs until the test lets it finish',
        parse: () => ({}),
        async run(_p, ctx) {
          // Until released, or until the worker gives the job up (a drain's deadline).
          await Promise.race([held, new Promise((r) => ctx.signal.addEventListener('abort', r))]);
          return null;
        },
      }),
      defineJob<{ n: number }, null>({
        type: 'test.quick',
        description: 'a short job of the backlog',
        parse: (p) => p as { n: number },
        async run(p) {
          ranHere.push(String(p.n));
          return null;
        },
      }),
    ]);
    return { registry, release };
  };

  const env = (ecsTask: boolean) =>
    localWorkerEnv(db, sqs, {
      JOBS_CONCURRENCY: '1',
      JOBS_PREFETCH: '3',
      ...(ecsTask
        ? {
            ECS_AGENT_URI: agent.uri,
            ECS_CONTAINER_METADATA_URI_V4: metadata.uri,
            JOBS_DEPLOYMENT_CHECK_SECONDS: '1',
            AWS_REGION: 'eu-west-1',
          }
        : {}),
    });

  it('the old task hands back what it claimed ahead, takes nothing more, finishes its running job, then drops its protection; the new task drains the backlog', async () => {
    primary(OLD, 1, 1);
    const oldRan: string[] = [];
    const old = registryFor(oldRan);
    const oldTask = await startWorkerService(env(true), old.registry, []);
    services.push(oldTask);
    const client = new JobClient({
      pool: db.pool,
      registry: old.registry,
      publisher: new Publisher(db.pool, new SqsQueue({ queueUrl: sqs.queueUrl, endpoint: sqs.endpoint }), silentLogger),
      defaultMaxAttempts: 3,
    });
    const [long] = await client.enqueueNow({ type: 'test.hold', payload: {} });
    await waitFor(async () => (await client.store.get(long!.job.id))!.state === 'running', 10_000, 'the long job runs');
    const backlog = await client.enqueueNow(Array.from({ length: 6 }, (_, n) => ({ type: 'test.quick', payload: { n } })));
    const ids = backlog.map((r) => r.job.id);
    // The old task claims some of the backlog ahead (prefetch 3) while its one slot runs the long job.
    await waitFor(
      async () => (await Promise.all(ids.map((id) => client.store.get(id)))).some((j) => j!.state === 'running'),
      10_000,
      'claimed ahead',
    );
    expect(agent.calls.at(-1)!.body).toMatchObject({ ProtectionEnabled: true });

    // The new deployment is primary but not all up: nothing changes.
    primary(NEW, 0, 1);
    await new Promise((r) => setTimeout(r, 2500));
    expect((await Promise.all(ids.map((id) => client.store.get(id)))).filter((j) => j!.state === 'running').length).toBeGreaterThan(0);

    // All of the new deployment's tasks run: the old task retires.
    primary(NEW, 1, 1);
    await waitFor(
      async () => (await Promise.all(ids.map((id) => client.store.get(id)))).every((j) => j!.state === 'pending' && j!.leaseOwner === null),
      10_000,
      'what it claimed ahead handed back',
    );
    // It takes nothing more, and keeps running its long job under protection.
    await new Promise((r) => setTimeout(r, 3000));
    expect((await Promise.all(ids.map((id) => client.store.get(id)))).map((j) => j!.state)).toEqual(ids.map(() => 'pending'));
    expect((await client.store.get(long!.job.id))!.state).toBe('running');
    expect(agent.calls.at(-1)!.body).toMatchObject({ ProtectionEnabled: true });

    // The long job finishes here, on its first attempt; then protection is dropped, and ECS may stop the task.
    old.release();
    await waitFor(async () => (await client.store.get(long!.job.id))!.state === 'succeeded', 10_000, 'the long job succeeded');
    expect((await client.store.get(long!.job.id))!.attempt).toBe(1);
    await waitFor(() => agent.calls.at(-1)!.body.ProtectionEnabled === false, 15_000, 'protection dropped while the task still runs');

    // The new deployment's task drains the backlog; the old one ran none of it.
    const newRan: string[] = [];
    services.push(await startWorkerService(env(false), registryFor(newRan).registry, []));
    await waitFor(
      async () => (await Promise.all(ids.map((id) => client.store.get(id)))).every((j) => j!.state === 'succeeded'),
      15_000,
      'backlog drained',
    );
    expect(oldRan).toEqual([]);
    expect(newRan.sort()).toEqual(['0', '1', '2', '3', '4', '5']);
    for (const s of services.splice(0)) await s.shutdown('test over');
  }, 90_000);

  it('a SIGTERM while a retired task waits for its long job shortens the drain to the usual one: the job is released, not waited for', async () => {
    primary(OLD, 1, 1);
    const held = registryFor([]);
    const oldTask = await startWorkerService(env(true), held.registry, []);
    services.push(oldTask);
    const client = new JobClient({
      pool: db.pool,
      registry: held.registry,
      publisher: new Publisher(db.pool, new SqsQueue({ queueUrl: sqs.queueUrl, endpoint: sqs.endpoint }), silentLogger),
      defaultMaxAttempts: 3,
    });
    const [long] = await client.enqueueNow({ type: 'test.hold', payload: {} });
    await waitFor(async () => (await client.store.get(long!.job.id))!.state === 'running', 10_000, 'the long job runs');
    const asked = ecs.commandCalls(DescribeServicesCommand).length;
    primary(NEW, 1, 1);
    // Retired once ECS has been asked after the switch (the watch retires the worker as the answer arrives).
    await waitFor(() => ecs.commandCalls(DescribeServicesCommand).length > asked, 10_000, 'ECS asked after the new deployment is up');
    await new Promise((r) => setTimeout(r, 200));
    expect((await client.store.get(long!.job.id))!.state).toBe('running');
    const t0 = Date.now();
    await oldTask.shutdown('SIGTERM');
    services.splice(0);
    expect(Date.now() - t0).toBeLessThan(10_000); // the drain (2 s) and closing, not the retired drain's hours
    const after = (await client.store.get(long!.job.id))!;
    expect([after.state, after.leaseOwner]).toEqual(['pending', null]);
    held.release();
  }, 60_000);
});
