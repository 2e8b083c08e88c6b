// The SQS wire (runtime/queue/sqs-wire.ts), the hot path of SqsQueue: against the local SQS
// endpoint for what SQS does, and against a fake SQS (node:http in this file) for what the SDK
// guaranteed and the wire must keep: retries on throttling, 5xx, a reset connection and a silent
// socket, none on another 4xx, errors named as the SDK names them, MD5 checks, the signature.
import { createHash } from 'node:crypto';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as sdk from '@aws-sdk/client-sqs';
import { DeleteMessageBatchCommand, SQSClient } from '@aws-sdk/client-sqs';
import { HttpRequest } from '@smithy/core/protocols';
import { SignatureV4 } from '@smithy/signature-v4';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type LocalSqs, startLocalSqs } from '../../dev/fauxqs.ts';
import { sqsLanes } from '../../runtime/queue/lanes.ts';
import { SqsBatchError, SqsQueue } from '../../runtime/queue/sqs.ts';
import { signSqsRequest } from '../../runtime/queue/sqs-sign.ts';
import { type SqsWireOptions, SqsWire, sqsErrorName } from '../../runtime/queue/sqs-wire.ts';
import type { SqsHttpClient } from '../../runtime/config/sqs.ts';

const md5 = (s: string) => createHash('md5').update(s, 'utf8').digest('hex');

describe('SqsQueue over the wire, on the local SQS endpoint', () => {
  let sqs: LocalSqs;
  let q: SqsQueue;
  beforeAll(async () => {
    sqs = await startLocalSqs({ timings: { visibilityTimeoutSeconds: 30, maxReceiveCount: 10 }, prefix: 'sqs-wire' });
    q = new SqsQueue({ queueUrl: sqs.queueUrl, endpoint: sqs.endpoint, region: 'us-east-1' });
  });
  afterAll(() => sqs.stop());

  it('is what a queue built from settings uses, here and through sqsLanes (the services)', () => {
    expect(q.hotPath).toBeInstanceOf(SqsWire);
    const lanes = sqsLanes({ queueUrl: sqs.queueUrl, dlqUrl: sqs.dlqUrl, endpoint: sqs.endpoint, region: 'us-east-1' });
    expect(lanes.wires).toHaveLength(1);
    expect(lanes.wires[0]).toBeInstanceOf(SqsWire);
    for (const s of lanes.sqsQueues) expect(s.hotPath).toBe(lanes.wires[0]);
    // Two lanes: a wire each, which the lane's queue and its DLQ share.
    const two = sqsLanes({
      queueUrl: sqs.queueUrl,
      dlqUrl: sqs.dlqUrl,
      urgentQueueUrl: `${sqs.queueUrl}-u`,
      urgentDlqUrl: `${sqs.dlqUrl}-u`,
      endpoint: sqs.endpoint,
      region: 'us-east-1',
    });
    expect(two.wires).toHaveLength(2);
    const [urgentQ, bulkQ] = two.sqsQueues;
    expect([urgentQ!.hotPath, bulkQ!.hotPath]).toEqual([two.wires[1], two.wires[0]]);
    expect((two.dlq!.queues.find((q) => q.lanes.includes('urgent'))!.queue as SqsQueue).hotPath).toBe(two.wires[1]);
  });

  it('sends, receives, changes visibility and deletes; attributes and receive counts come back', async () => {
    await q.send([
      { body: 'one', attributes: { Reason: 'test', Empty: '' } },
      { body: 'twö ✓', attributes: { Reason: 'unicode' } },
    ]);
    const got = await q.receive(10, 1);
    expect(got.map((m) => m.body).sort()).toEqual(['one', 'twö ✓']);
    const one = got.find((m) => m.body === 'one')!;
    expect(one).toMatchObject({ receiveCount: 1, attributes: { Reason: 'test' } });
    // Visibility 0: back at once, received again with a new handle and a higher count.
    expect(await q.changeVisibility([{ receipt: one.receipt, seconds: 0 }])).toEqual([]);
    const [again] = await q.receive(10, 1);
    expect(again).toMatchObject({ messageId: one.messageId, receiveCount: 2 });
    expect(await q.delete([...got.filter((m) => m !== one).map((m) => m.receipt), again!.receipt])).toEqual([]);
    expect(sqs.inspect('sqs-wire-queue')).toMatchObject({ ready: 0, inflight: 0, delayed: 0 });
  });

  it('a receive of ten large messages (a quarter-megabyte answer in many packets) comes back whole, multi-byte characters intact', async () => {
    const bodies = Array.from({ length: 10 }, (_, i) => `${i}:${'ü€'.repeat(4_000)}`);
    await q.send(bodies.map((body) => ({ body })));
    const got: string[] = [];
    for (let tries = 0; got.length < 10 && tries < 10; tries++) {
      const batch = await q.receive(10, 1);
      got.push(...batch.map((m) => m.body));
      await q.delete(batch.map((m) => m.receipt));
    }
    expect(got.sort()).toEqual([...bodies].sort());
  });

  it('reports a stale receipt handle per entry: the handle of an earlier delivery cannot change visibility', async () => {
    await q.send([{ body: 'stale' }]);
    const [first] = await q.receive(1, 1);
    await q.changeVisibility([{ receipt: first!.receipt, seconds: 0 }]);
    const [second] = await q.receive(1, 1);
    expect(second!.receipt).not.toBe(first!.receipt);
    const failures = await q.changeVisibility([
      { receipt: second!.receipt, seconds: 30 },
      { receipt: first!.receipt, seconds: 30 },
    ]);
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({ receipt: first!.receipt, stale: true });
    await q.delete([second!.receipt]);
  });

  it('delays a message', async () => {
    await q.send([{ body: 'later', delaySeconds: 1 }]);
    expect(await q.receive(10, 0)).toEqual([]);
    expect(sqs.inspect('sqs-wire-queue').delayed).toBe(1);
    await new Promise((r) => setTimeout(r, 1100));
    const got = await q.receive(10, 2);
    expect(got.map((m) => m.body)).toEqual(['later']);
    await q.delete(got.map((m) => m.receipt));
  });

  it('a long poll aborted by the signal returns [] promptly', async () => {
    const ac = new AbortController();
    const t0 = Date.now();
    setTimeout(() => ac.abort(), 150);
    expect(await q.receive(10, 20, ac.signal)).toEqual([]);
    expect(Date.now() - t0).toBeLessThan(1500);
    expect(await q.receive(10, 20, ac.signal)).toEqual([]);
  });
});

// A fake SQS: answers the n-th request with handlers[n] (the last one from then on) and records
// every request.
type Handler = (req: IncomingMessage, body: string, res: ServerResponse) => void;
interface FakeSqs {
  url: string;
  requests: { headers: IncomingMessage['headers']; body: Record<string, unknown> }[];
  close(): Promise<void>;
}

async function fakeSqs(...handlers: Handler[]): Promise<FakeSqs> {
  const requests: FakeSqs['requests'] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      requests.push({ headers: req.headers, body: JSON.parse(body) as Record<string, unknown> });
      handlers[Math.min(requests.length - 1, handlers.length - 1)]!(req, body, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

const json =
  (status: number, body: unknown, headers: Record<string, string> = {}): Handler =>
  (_req, _body, res) => {
    res.writeHead(status, { 'content-type': 'application/x-amz-json-1.0', ...headers });
    res.end(typeof body === 'string' ? body : JSON.stringify(body));
  };
const ok = (body: unknown = {}) => json(200, body);
const sqsError = (status: number, queryCode: string | null, type: string, message: string) =>
  json(status, { __type: `com.amazonaws.sqs#${type}`, message }, queryCode ? { 'x-amzn-query-error': `${queryCode};Sender` } : {});
const hang: Handler = () => undefined;

const QUEUE_URL = 'https://sqs.eu-west-1.amazonaws.com/123456789012/jobs';

/** What the wire sends through in the describe running (both are tested against the fake SQS). */
let httpClient: SqsHttpClient = 'platform';

function wireFor(fake: FakeSqs, o: Partial<SqsWireOptions> = {}): SqsWire {
  return new SqsWire({
    httpClient,
    credentials: async () => ({ accessKeyId: 'AKID', secretAccessKey: 'secret' }),
    region: async () => 'eu-west-1',
    maxAttempts: async () => 5,
    endpoint: async () => new URL(fake.url),
    retryDelayMs: { base: 1, throttling: 1 },
    ...o,
  });
}
const queueFor = (wire: SqsWire) => new SqsQueue({ queueUrl: QUEUE_URL, client: new SQSClient({ region: 'eu-west-1' }), wire });

async function using<T>(fake: FakeSqs, f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } finally {
    await fake.close();
  }
}

describe('the queue count (GetQueueAttributes, through the SDK)', () => {
  it("gives up when its signal fires: an SQS that stops answering does not hold the reconciler's lock for the SDK's 15 minutes (maintenance review)", async () => {
    const silent = await fakeSqs(hang);
    const queue = new SqsQueue({ queueUrl: `${silent.url}/123456789012/jobs`, endpoint: silent.url, region: 'eu-west-1' });
    const t0 = Date.now();
    const err = await using(silent, () => queue.approximateCount(AbortSignal.timeout(200)).catch((e: unknown) => e));
    expect({ name: (err as Error).name, within2s: Date.now() - t0 < 2000 }).toEqual({ name: 'AbortError', within2s: true });
  });
});

describe.each(['platform', 'node'] as const)('SqsQueue over the wire (the %s HTTP client), against a fake SQS', (client) => {
  beforeAll(() => {
    httpClient = client;
  });
  afterAll(() => {
    httpClient = 'platform';
  });

  it('speaks AWS JSON 1.0: POST / with the target, the query mode and a signature', async () => {
    const fake = await fakeSqs(ok({ Successful: [{ Id: '0' }], Failed: [] }));
    await using(fake, () => queueFor(wireFor(fake)).delete(['r0']));
    const [req] = fake.requests;
    expect(req!.headers).toMatchObject({
      'content-type': 'application/x-amz-json-1.0',
      'x-amz-target': 'AmazonSQS.DeleteMessageBatch',
      'x-amzn-query-mode': 'true',
    });
    expect(req!.headers.authorization).toMatch(/^AWS4-HMAC-SHA256 Credential=AKID\/\d{8}\/eu-west-1\/sqs\/aws4_request, SignedHeaders=/);
    expect(req!.body).toEqual({ QueueUrl: QUEUE_URL, Entries: [{ Id: '0', ReceiptHandle: 'r0' }] });
  });

  it('retries throttling until it passes, by code or by status', async () => {
    for (const throttled of [
      sqsError(403, 'RequestThrottled', 'RequestThrottled', 'Rate exceeded'),
      json(400, { __type: 'com.amazonaws.sqs#ThrottlingException', message: 'Rate exceeded' }),
      json(429, ''),
    ]) {
      const fake = await fakeSqs(throttled, throttled, ok({ Successful: [{ Id: '0' }], Failed: [] }));
      expect(await using(fake, () => queueFor(wireFor(fake)).delete(['r0']))).toEqual([]);
      expect(fake.requests).toHaveLength(3);
    }
  });

  it('retries a 500 and a 503; gives up after maxAttempts with the last error', async () => {
    const fake = await fakeSqs(
      json(500, { __type: 'InternalFailure', message: 'boom' }),
      json(503, '<html>busy</html>'),
      ok({ Successful: [], Failed: [] }),
    );
    await using(fake, () => queueFor(wireFor(fake)).changeVisibility([{ receipt: 'r', seconds: 5 }]));
    expect(fake.requests).toHaveLength(3);

    const down = await fakeSqs(json(503, ''));
    const err = await using(down, () =>
      queueFor(wireFor(down, { maxAttempts: async () => 3 }))
        .delete(['r'])
        .catch((e: unknown) => e),
    );
    expect(down.requests).toHaveLength(3);
    expect(err).toMatchObject({ name: 'Unknown', $fault: 'server', $metadata: { httpStatusCode: 503, attempts: 3 } });
  });

  it('does not retry another 4xx, and names the error as the SDK does', async () => {
    const fake = await fakeSqs(
      sqsError(400, 'AWS.SimpleQueueService.NonExistentQueue', 'QueueDoesNotExist', 'The specified queue does not exist.'),
    );
    const err = await using(fake, () =>
      queueFor(wireFor(fake))
        .receive(10, 0)
        .catch((e: unknown) => e),
    );
    expect(fake.requests).toHaveLength(1);
    expect(err).toBeInstanceOf(Error);
    expect(err).toMatchObject({
      name: 'QueueDoesNotExist',
      message: 'The specified queue does not exist.',
      $fault: 'client',
      $metadata: { httpStatusCode: 400, attempts: 1 },
      Code: 'AWS.SimpleQueueService.NonExistentQueue',
    });
  });

  it('throws the same name, message, status and codes as the SDK for the same answers', async () => {
    const answers: Handler[] = [
      sqsError(400, 'AWS.SimpleQueueService.NonExistentQueue', 'QueueDoesNotExist', 'The specified queue does not exist.'),
      sqsError(404, 'ReceiptHandleIsInvalid', 'ReceiptHandleIsInvalid', 'bad handle'),
      sqsError(400, 'KMS.ThrottlingException', 'KmsThrottled', 'kms says slow down'),
      json(400, { __type: 'com.amazonaws.sqs#InvalidAddress', message: 'no such address' }),
      json(
        403,
        { __type: 'com.amazon.coral.service#AccessDeniedException', Message: 'not allowed' },
        { 'x-amzn-query-error': 'AccessDenied;Sender' },
      ),
      json(400, { __type: 'com.amazonaws.sqs#SomethingNew', message: 'new' }),
      json(502, '<html>bad gateway</html>'),
      json(503, ''),
    ];
    for (const answer of answers) {
      const fake = await fakeSqs(answer);
      const pick = (e: unknown) => {
        const x = e as {
          name: string;
          message: string;
          $fault: string;
          $metadata: { httpStatusCode: number };
          Code?: string;
          Type?: string;
        };
        // The first line: an answer that is not JSON is a SyntaxError whose second line says where to look.
        return {
          name: x.name,
          message: x.message.split('\n')[0],
          fault: x.$fault,
          status: x.$metadata.httpStatusCode,
          Code: x.Code,
          Type: x.Type,
        };
      };
      const viaSdk = await new SQSClient({
        region: 'eu-west-1',
        endpoint: fake.url,
        maxAttempts: 1,
        credentials: { accessKeyId: 'AKID', secretAccessKey: 'secret' },
      })
        .send(new DeleteMessageBatchCommand({ QueueUrl: QUEUE_URL, Entries: [{ Id: '0', ReceiptHandle: 'r' }] }))
        .catch(pick);
      const viaWire = await wireFor(fake, { maxAttempts: async () => 1 })
        .deleteMessageBatch({ QueueUrl: QUEUE_URL, Entries: [{ Id: '0', ReceiptHandle: 'r' }] })
        .catch(pick);
      await fake.close();
      expect(viaWire).toEqual(viaSdk);
    }
  });

  it('maps every SQS error code to the name of its shape, as the SDK schemas say', () => {
    const schemas = Object.entries(sdk).filter(
      ([k, v]) => k.endsWith('$') && Array.isArray(v) && v[0] === -3 && k !== 'SQSServiceException$',
    );
    expect(schemas.length).toBeGreaterThan(20);
    for (const [, v] of schemas) {
      const [, , name, traits] = v as unknown as [number, string, string, { awsQueryError?: [string, number] }];
      expect(sqsErrorName(name)).toBe(name);
      expect(sqsErrorName(`com.amazonaws.sqs#${name}`)).toBe(name);
      if (traits.awsQueryError) expect(sqsErrorName(traits.awsQueryError[0])).toBe(name);
    }
  });

  it('retries a connection reset in the middle of a response', async () => {
    const cut: Handler = (_req, _body, res) => {
      res.writeHead(200, { 'content-type': 'application/x-amz-json-1.0', 'content-length': '500' });
      res.write('{"Successful":[');
      setTimeout(() => res.socket?.destroy(), 20);
    };
    const fake = await fakeSqs(cut, ok({ Successful: [{ Id: '0' }], Failed: [] }));
    expect(await using(fake, () => queueFor(wireFor(fake)).delete(['r0']))).toEqual([]);
    expect(fake.requests).toHaveLength(2);
  });

  it('abandons a request that gets no answer at its deadline, and retries it', async () => {
    const fake = await fakeSqs(hang, ok({ Successful: [{ Id: '0' }], Failed: [] }));
    const t0 = Date.now();
    expect(await using(fake, () => queueFor(wireFor(fake, { requestTimeoutMs: 200 })).delete(['r0']))).toEqual([]);
    expect(fake.requests).toHaveLength(2);
    expect(Date.now() - t0).toBeLessThan(2000);

    // A receive's deadline is its wait plus the grace; when every attempt hangs, the timeout is what is thrown.
    const silent = await fakeSqs(hang);
    const wire = wireFor(silent, { receiveGraceMs: 150, maxAttempts: async () => 2 });
    const err = await using(silent, () =>
      queueFor(wire)
        .receive(10, 0)
        .catch((e: unknown) => e),
    );
    expect(err).toMatchObject({ name: 'TimeoutError', code: 'ETIMEDOUT', $metadata: { attempts: 2 } });
    expect(silent.requests).toHaveLength(2);
  });

  it('does not retry after the signal aborted a receive', async () => {
    const throttled = sqsError(403, 'RequestThrottled', 'RequestThrottled', 'Rate exceeded');
    const fake = await fakeSqs(throttled);
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 100);
    const wire = wireFor(fake, { retryDelayMs: { base: 1000, throttling: 1000 }, maxAttempts: async () => 50 });
    expect(await using(fake, () => queueFor(wire).receive(10, 1, ac.signal))).toEqual([]);
    const n = fake.requests.length;
    await new Promise((r) => setTimeout(r, 200));
    expect(fake.requests.length).toBe(n);
  });

  it('throws on a received body whose MD5 differs, and on a sent one SQS acknowledges with another MD5', async () => {
    const message = (body: string, digest: string) => ({ MessageId: 'm1', ReceiptHandle: 'r1', Body: body, MD5OfBody: digest });
    const good = await fakeSqs(ok({ Messages: [message('{"jobId":"a"}', md5('{"jobId":"a"}'))] }));
    expect(await using(good, () => queueFor(wireFor(good)).receive(10, 0))).toHaveLength(1);

    const bad = await fakeSqs(ok({ Messages: [message('{"jobId":"a"}', md5('{"jobId":"b"}'))] }));
    await expect(using(bad, () => queueFor(wireFor(bad)).receive(10, 0))).rejects.toThrow(/Invalid MD5 checksum on messages: m1/);
    expect(bad.requests).toHaveLength(1);

    const sent = await fakeSqs(ok({ Successful: [{ Id: '0', MessageId: 'm0', MD5OfMessageBody: md5('something else') }], Failed: [] }));
    await expect(using(sent, () => queueFor(wireFor(sent)).send([{ body: 'b' }]))).rejects.toThrow(/Invalid MD5 checksum on messages: m0/);
  });

  it('corrects its clock from a skew error and retries signed at the server time', async () => {
    const ahead = new Date(Date.now() + 3_600_000).toUTCString();
    const fake = await fakeSqs(
      json(400, { __type: 'com.amazonaws.sqs#RequestTimeTooSkewed', message: 'skewed' }, { date: ahead }),
      ok({ Successful: [], Failed: [] }),
    );
    await using(fake, () => queueFor(wireFor(fake)).delete(['r']));
    expect(fake.requests).toHaveLength(2);
    const signedAt = (h: IncomingMessage['headers']) =>
      Date.parse(String(h['x-amz-date']).replace(/^(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z$/, '$1-$2-$3T$4:$5:$6Z'));
    expect(signedAt(fake.requests[1]!.headers) - signedAt(fake.requests[0]!.headers)).toBeGreaterThan(3_500_000);
  });
});

// What SqsQueue makes of SQS's answers, over the wire (these were the SDK path's before).
describe('the lanes over the wire (sqsLanes, the services)', () => {
  it("each lane has its own connections: an urgent queue that stops answering leaves the bulk lane's sends going at once (API review)", async () => {
    // One wire for both lanes: 256 urgent sends held every connection, and a bulk send waited for
    // one until the urgent ones' 30 s deadline.
    const fake = await fakeSqs((req, body, res) => {
      const input = JSON.parse(body) as { QueueUrl: string; Entries: { Id: string; MessageBody: string }[] };
      if (input.QueueUrl.endsWith('/urgent')) return; // silent
      const sent = input.Entries.map((e) => ({ Id: e.Id, MessageId: `m${e.Id}`, MD5OfMessageBody: md5(e.MessageBody) }));
      json(200, { Successful: sent, Failed: [] })(req, body, res);
    });
    const base = 'https://sqs.eu-west-1.amazonaws.com/123456789012';
    const lanes = sqsLanes({ queueUrl: `${base}/bulk`, urgentQueueUrl: `${base}/urgent`, endpoint: fake.url, region: 'eu-west-1' });
    expect(lanes.wires).toHaveLength(2);
    const urgent = Array.from({ length: 300 }, (_, i) => lanes.queue.send([{ body: `u${i}`, lane: 'urgent' }]));
    let urgentSettled = 0;
    for (const u of urgent)
      u.then(
        () => urgentSettled++,
        () => urgentSettled++,
      );
    try {
      await vi.waitFor(() => expect(fake.requests.length).toBeGreaterThanOrEqual(256), { timeout: 10_000 });
      await lanes.queue.send([
        { body: 'b0', lane: 'bulk' },
        { body: 'b1', lane: 'bulk' },
      ]);
      expect(urgentSettled).toBe(0);
      expect(fake.requests.filter((r) => String(r.body.QueueUrl).endsWith('/bulk'))).toHaveLength(1);
    } finally {
      for (const w of lanes.wires) w.destroy();
      await fake.close();
      await Promise.allSettled(urgent);
    }
  });
});

describe('SqsQueue batches over the wire', () => {
  it('send throws naming the failed entries, so the caller keeps its outbox row', async () => {
    const fake = await fakeSqs(
      ok({
        Successful: [{ Id: '0', MessageId: 'a', MD5OfMessageBody: md5('a') }],
        Failed: [{ Id: '1', Code: 'InternalError', SenderFault: false, Message: 'try again' }],
      }),
    );
    const err = await using(fake, () =>
      queueFor(wireFor(fake))
        .send([{ body: 'a' }, { body: 'b' }])
        .catch((e: unknown) => e),
    );
    expect(err).toBeInstanceOf(SqsBatchError);
    expect((err as Error).message).toMatch(/SendMessageBatch: 1 entry failed: InternalError \(try again\)/);
  });

  it('send splits into batches of 10 and caps delays at 900 s', async () => {
    const fake = await fakeSqs((_req, body, res) => {
      const entries = (JSON.parse(body) as { Entries: { Id: string; MessageBody: string }[] }).Entries;
      json(200, {
        Successful: entries.map((e) => ({ Id: e.Id, MessageId: `m${e.Id}`, MD5OfMessageBody: md5(e.MessageBody) })),
        Failed: [],
      })(_req, body, res);
    });
    await using(fake, () => queueFor(wireFor(fake)).send(Array.from({ length: 25 }, (_, i) => ({ body: `m${i}`, delaySeconds: 5000 }))));
    const entries = fake.requests.map((r) => r.body.Entries as { DelaySeconds?: number }[]);
    expect(entries.map((e) => e.length)).toEqual([10, 10, 5]);
    expect(entries[0]![0]!.DelaySeconds).toBe(900);
  });

  it('reports a stale receipt handle per entry on visibility changes and deletes', async () => {
    const fake = await fakeSqs(
      ok({
        Successful: [{ Id: '0' }],
        Failed: [
          { Id: '1', Code: 'ReceiptHandleIsInvalid', SenderFault: true, Message: 'The receipt handle has expired' },
          { Id: '2', Code: 'InternalError', SenderFault: false, Message: 'x' },
        ],
      }),
      ok({ Successful: [], Failed: [{ Id: '0', Code: 'ReceiptHandleIsInvalid', SenderFault: true }] }),
    );
    const q = queueFor(wireFor(fake));
    await using(fake, async () => {
      expect(
        await q.changeVisibility([
          { receipt: 'r0', seconds: 10 },
          { receipt: 'r1', seconds: 10 },
          { receipt: 'r2', seconds: 10 },
        ]),
      ).toEqual([
        { receipt: 'r1', code: 'ReceiptHandleIsInvalid', message: 'The receipt handle has expired', stale: true },
        { receipt: 'r2', code: 'InternalError', message: 'x', stale: false },
      ]);
      expect((await q.delete(['gone']))[0]).toMatchObject({ receipt: 'gone', stale: true });
    });
  });

  it('clamps visibility to SQS limits and asks for the receive count and attributes', async () => {
    const fake = await fakeSqs(
      ok({ Successful: [], Failed: [] }),
      ok({
        Messages: [
          {
            MessageId: 'm',
            ReceiptHandle: 'r',
            Body: '{}',
            MD5OfBody: md5('{}'),
            Attributes: { ApproximateReceiveCount: '3' },
            MessageAttributes: { Reason: { DataType: 'String', StringValue: 'x' } },
          },
        ],
      }),
    );
    const q = queueFor(wireFor(fake));
    const [m] = await using(fake, async () => {
      await q.changeVisibility([{ receipt: 'r', seconds: 99_999 }]);
      return q.receive(50, 60);
    });
    expect((fake.requests[0]!.body.Entries as { VisibilityTimeout: number }[])[0]!.VisibilityTimeout).toBe(43_200);
    expect(m).toMatchObject({ receiveCount: 3, attributes: { Reason: 'x' } });
    expect(fake.requests[1]!.body).toMatchObject({ MaxNumberOfMessages: 10, WaitTimeSeconds: 20, MessageAttributeNames: ['All'] });
    expect(fake.requests[1]!.body.MessageSystemAttributeNames).toContain('ApproximateReceiveCount');
  });

  it('a receive throttled past maxAttempts rejects with the error for the worker to back off on', async () => {
    const fake = await fakeSqs(sqsError(403, 'RequestThrottled', 'RequestThrottled', 'Rate exceeded'));
    const wire = wireFor(fake, { maxAttempts: async () => 2 });
    const err = await using(fake, () =>
      queueFor(wire)
        .receive(10, 1)
        .catch((e: unknown) => e),
    );
    expect(err).toMatchObject({ name: 'RequestThrottled', message: 'Rate exceeded', $metadata: { httpStatusCode: 403, attempts: 2 } });
  });
});

describe('SigV4', () => {
  const sdkSha256 = new SQSClient({ region: 'eu-west-1' }).config.sha256;
  const cases = [
    {
      host: 'sqs.eu-west-1.amazonaws.com',
      region: 'eu-west-1',
      credentials: {
        accessKeyId: 'ASIAEXAMPLE',
        secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
        sessionToken: 'IQoJb3JpZ2luX2VjEXAMPLE//token+==',
      },
    },
    { host: '127.0.0.1:4566', region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } },
  ];
  for (const c of cases) {
    it(`signs as @smithy/signature-v4 does (${c.host}${c.credentials.sessionToken ? ', session token' : ''})`, async () => {
      const date = new Date('2026-03-04T05:06:07.890Z');
      const body = JSON.stringify({ QueueUrl: QUEUE_URL, Entries: [{ Id: '0', ReceiptHandle: 'AQEB+/x==', VisibilityTimeout: 30 }] });
      const cache = {};
      // Twice with one cache, a day apart: the cached signing key must follow the date.
      for (const when of [date, new Date(date.getTime() + 86_400_000)]) {
        const ours = signSqsRequest(
          { host: c.host, operation: 'ChangeMessageVisibilityBatch', body, region: c.region, credentials: c.credentials, date: when },
          cache,
        );
        const [hostname, port] = c.host.split(':');
        const signed = await new SignatureV4({ credentials: c.credentials, region: c.region, service: 'sqs', sha256: sdkSha256 }).sign(
          new HttpRequest({
            method: 'POST',
            protocol: port ? 'http:' : 'https:',
            hostname: hostname!,
            ...(port ? { port: Number(port) } : {}),
            path: '/',
            headers: {
              'content-type': 'application/x-amz-json-1.0',
              host: c.host,
              'x-amz-target': 'AmazonSQS.ChangeMessageVisibilityBatch',
              'x-amzn-query-mode': 'true',
            },
            body,
          }),
          { signingDate: when },
        );
        expect(ours).toEqual(signed.headers);
      }
    });
  }
});
