// sqsFromEnv: the one reading of the SQS settings that the worker, the API, the jobs command and
// the local stack share. The region comes from AWS_REGION; us-east-1 only next to a local endpoint;
// a missing region is refused with the variable and the rule named; every URL given is checked.
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../runtime/config/rules.ts';
import { dlqUrlFromEnv, isLocalEndpoint, LOCAL_SQS_REGION, sqsFromEnv, sqsFromEnvIfSet } from '../../runtime/config/sqs.ts';
import { sqsClientOptions, sqsLanes } from '../../runtime/queue/lanes.ts';
import { createSqsClient } from '../../runtime/queue/sqs.ts';

const QUEUE = 'https://sqs.eu-west-1.amazonaws.com/123456789012/jobs';
const DLQ = 'https://sqs.eu-west-1.amazonaws.com/123456789012/jobs-dlq';

const configError = (read: () => unknown): ConfigError => {
  try {
    read();
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error('expected a ConfigError');
};

describe('sqsFromEnv', () => {
  it('reads the queue, the DLQ, the endpoint and the region', () => {
    expect(sqsFromEnv({ JOBS_QUEUE_URL: QUEUE, AWS_REGION: 'eu-west-1' })).toEqual({ queueUrl: QUEUE, region: 'eu-west-1' });
    expect(sqsFromEnv({ JOBS_QUEUE_URL: ` ${QUEUE} `, JOBS_DLQ_URL: DLQ, AWS_REGION: ' eu-west-1 ' })).toEqual({
      queueUrl: QUEUE,
      dlqUrl: DLQ,
      region: 'eu-west-1',
    });
  });

  it('defaults the region to us-east-1 only next to a local endpoint, and AWS_REGION still wins there', () => {
    const local = { JOBS_QUEUE_URL: 'http://127.0.0.1:4566/000000000000/jobs', JOBS_SQS_ENDPOINT: 'http://127.0.0.1:4566' };
    expect(LOCAL_SQS_REGION).toBe('us-east-1');
    expect(sqsFromEnv(local)).toEqual({ queueUrl: local.JOBS_QUEUE_URL, endpoint: local.JOBS_SQS_ENDPOINT, region: 'us-east-1' });
    expect(sqsFromEnv({ ...local, AWS_REGION: 'eu-central-1' }).region).toBe('eu-central-1');
  });

  it('refuses a missing region without a local endpoint, naming the variable, the rule and the fix', () => {
    for (const region of [undefined, '', '  ']) {
      const err = configError(() => sqsFromEnv({ JOBS_QUEUE_URL: QUEUE, AWS_REGION: region }));
      expect(err.violations.map((v) => v.rule)).toEqual(['aws-region-set']);
      expect(err.message).toContain('[aws-region-set] AWS_REGION is required (the region of the queues, e.g. AWS_REGION=eu-west-1)');
      expect(err.message).toContain('it defaults to us-east-1 only next to a local JOBS_SQS_ENDPOINT');
    }
  });

  it('reports every problem at once, each with its variable', () => {
    const err = configError(() => sqsFromEnv({ JOBS_DLQ_URL: 'not a url', JOBS_SQS_ENDPOINT: 'nor this' }));
    expect(err.violations.map((v) => v.message)).toEqual([
      'JOBS_QUEUE_URL is required',
      'JOBS_DLQ_URL = "not a url" is not a URL',
      'JOBS_SQS_ENDPOINT = "nor this" is not a URL',
    ]);
  });

  it('requires the DLQ only when asked (the worker sends dead letters there)', () => {
    expect(sqsFromEnv({ JOBS_QUEUE_URL: QUEUE, AWS_REGION: 'eu-west-1' }).dlqUrl).toBeUndefined();
    const err = configError(() => sqsFromEnv({ JOBS_QUEUE_URL: QUEUE, AWS_REGION: 'eu-west-1' }, { dlq: true }));
    expect(err.violations).toEqual([{ rule: 'jobs_dlq_url-set', message: 'JOBS_DLQ_URL is required' }]);
    expect(sqsFromEnv({ JOBS_QUEUE_URL: QUEUE, JOBS_DLQ_URL: DLQ, AWS_REGION: 'eu-west-1' }, { dlq: true }).dlqUrl).toBe(DLQ);
  });

  it('reads JOBS_SQS_MAX_ATTEMPTS, which the SDK client and the wire both take, and refuses it out of range', async () => {
    const env = { JOBS_QUEUE_URL: QUEUE, AWS_REGION: 'eu-west-1' };
    expect(sqsFromEnv(env).maxAttempts).toBeUndefined();
    const settings = sqsFromEnv({ ...env, JOBS_SQS_MAX_ATTEMPTS: '3' });
    expect(settings.maxAttempts).toBe(3);
    const lanes = sqsLanes(settings);
    expect(await lanes.client.config.maxAttempts()).toBe(3);
    expect(await createSqsClient(sqsClientOptions(sqsFromEnv(env))).config.maxAttempts()).toBe(5);
    for (const bad of ['0', '11', '2.5', 'five']) {
      const err = configError(() => sqsFromEnv({ ...env, JOBS_SQS_MAX_ATTEMPTS: bad }));
      expect(err.violations).toEqual([
        { rule: 'jobs_sqs_max_attempts-range', message: `JOBS_SQS_MAX_ATTEMPTS = "${bad}" must be a whole number between 1 and 10` },
      ]);
    }
  });

  it("reads JOBS_SQS_HTTP_CLIENT (the platform's HTTP client unless node is asked for), and refuses another value", () => {
    const env = { JOBS_QUEUE_URL: QUEUE, AWS_REGION: 'eu-west-1' };
    expect(sqsLanes(sqsFromEnv(env)).wires.map((w) => w.httpClient)).toEqual(['platform']);
    expect(sqsLanes(sqsFromEnv({ ...env, JOBS_SQS_HTTP_CLIENT: 'node' })).wires.map((w) => w.httpClient)).toEqual(['node']);
    expect(configError(() => sqsFromEnv({ ...env, JOBS_SQS_HTTP_CLIENT: 'undici' })).violations).toEqual([
      { rule: 'sqs-http-client', message: 'JOBS_SQS_HTTP_CLIENT must be one of platform, node (got "undici"); unset, platform' },
    ]);
  });
});

describe('sqsFromEnvIfSet (the jobs command)', () => {
  it('is null without a queue URL: the command works on the database alone', () => {
    expect(sqsFromEnvIfSet({})).toBeNull();
    expect(sqsFromEnvIfSet({ JOBS_QUEUE_URL: ' ', JOBS_DLQ_URL: DLQ })).toBeNull();
  });

  it('with a queue URL, refuses a missing region like the services (no silent us-east-1)', () => {
    expect(configError(() => sqsFromEnvIfSet({ JOBS_QUEUE_URL: QUEUE })).violations.map((v) => v.rule)).toEqual(['aws-region-set']);
    expect(sqsFromEnvIfSet({ JOBS_QUEUE_URL: QUEUE, AWS_REGION: 'eu-west-1' })).toEqual({ queueUrl: QUEUE, region: 'eu-west-1' });
  });
});

describe('dlqUrlFromEnv', () => {
  it('is the DLQ URL when given, checked to be a URL', () => {
    expect(dlqUrlFromEnv({})).toBeUndefined();
    expect(dlqUrlFromEnv({ JOBS_DLQ_URL: DLQ })).toBe(DLQ);
    expect(() => dlqUrlFromEnv({ JOBS_DLQ_URL: 'not a url' })).toThrow(/JOBS_DLQ_URL = "not a url" is not a URL/);
  });
  it("tells the local stack's endpoint (exact message counts) from a VPC endpoint's name (SQS's count, which lags)", () => {
    for (const local of ['http://127.0.0.1:4566', 'http://localhost:9324', 'http://sqs.us-east-1.localhost:4566', 'http://[::1]:4566'])
      expect(isLocalEndpoint(local), local).toBe(true);
    for (const remote of [undefined, 'https://vpce-0a1b-2c3d.sqs.eu-west-1.vpce.amazonaws.com', 'http://localstack:4566', 'not a url'])
      expect(isLocalEndpoint(remote), String(remote)).toBe(false);
  });
});
