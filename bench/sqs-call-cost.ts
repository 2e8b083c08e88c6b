// CPU per SQS call on the hot path, through the SDK and over the wire (runtime/queue/sqs-wire.ts,
// with the platform's HTTP client and with node:http),
// measured in this process against the local SQS endpoint running in its own (bench/sqs-local.ts),
// so the figures are the client's alone. Each operation is SqsQueue's, as the worker calls it:
// send 10 (to the DLQ, which fills), receive up to 10 (no wait, from the job queue, empty), change
// visibility of 10 and delete 10 (handles the queue does not know: SQS answers per entry, as for a
// stale handle). The two
// transports alternate in rounds, so a change in the machine's load falls on both.
//
//   npx tsx bench/sqs-call-cost.ts                # 3 rounds of 1,000 calls per operation and transport
//   npx tsx bench/sqs-call-cost.ts --calls 2000 --rounds 5

import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { createSqsClient, SqsQueue } from '../runtime/queue/sqs.ts';
import { SqsWire } from '../runtime/queue/sqs-wire.ts';
import { startSqsChild } from './sqs-local.ts';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

const { values: args } = parseArgs({
  options: { calls: { type: 'string', default: '1000' }, rounds: { type: 'string', default: '3' } },
});
const CALLS = Number(args.calls);
const ROUNDS = Number(args.rounds);

const sqs = await startSqsChild();
try {
  // Handed a client: the SDK path (queue/sqs.ts's rule); built from the endpoint: the wire.
  const client = createSqsClient({ endpoint: sqs.endpoint, region: 'us-east-1' });
  const sdk = (queueUrl: string) => new SqsQueue({ queueUrl, client });
  const wire = (queueUrl: string) => new SqsQueue({ queueUrl, endpoint: sqs.endpoint, region: 'us-east-1' });
  // The wire as it sent before the platform's HTTP client (JOBS_SQS_HTTP_CLIENT=node).
  const nodeWire = SqsWire.forClient(client, { httpClient: 'node' });
  const wireNode = (queueUrl: string) => new SqsQueue({ queueUrl, client, wire: nodeWire });
  const transports = {
    sdk: { queue: sdk(sqs.queueUrl), dlq: sdk(sqs.dlqUrl) },
    wire: { queue: wire(sqs.queueUrl), dlq: wire(sqs.dlqUrl) },
    wireNode: { queue: wireNode(sqs.queueUrl), dlq: wireNode(sqs.dlqUrl) },
  };
  type Queues = (typeof transports)['sdk'];
  // The floor: the same endpoint over the same kind of keep-alive agent, a body of about the size
  // the wire sends (an unknown queue name: the endpoint answers with a short error), nothing
  // signed, nothing parsed. What a call costs this machine before any client.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const endpoint = new URL(sqs.endpoint);
  const bare = (body: string) =>
    new Promise<void>((resolve, reject) => {
      const req = http.request(
        {
          host: endpoint.hostname,
          port: endpoint.port,
          method: 'POST',
          path: '/',
          agent,
          headers: {
            'content-type': 'application/x-amz-json-1.0',
            'x-amz-target': 'AmazonSQS.GetQueueUrl',
            'content-length': Buffer.byteLength(body),
          },
        },
        (res) => {
          res.on('data', () => undefined);
          res.on('end', resolve);
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  const bareBody = JSON.stringify({ QueueName: 'x'.repeat(600) });
  // The same bare request through undici (the HTTP client behind Node's fetch), one keep-alive
  // connection: the client people suggest when Node's own HTTP client is the cost.
  const undiciPool = new Pool(sqs.endpoint, { connections: 1 });
  const viaUndici = async (body: string) => {
    const res = await undiciPool.request({
      method: 'POST',
      path: '/',
      headers: { 'content-type': 'application/x-amz-json-1.0', 'x-amz-target': 'AmazonSQS.GetQueueUrl' },
      body,
    });
    await res.body.dump();
  };
  // Below the floor: the same request written on a raw keep-alive socket and its answer read
  // back, no HTTP client at all (what Node's HTTP client itself costs is bare minus raw).
  const socket = net.connect(Number(endpoint.port), endpoint.hostname);
  socket.setNoDelay(true);
  await once(socket, 'connect');
  const rawRequest = `POST / HTTP/1.1\r\nhost: ${endpoint.host}\r\ncontent-type: application/x-amz-json-1.0\r\nx-amz-target: AmazonSQS.GetQueueUrl\r\ncontent-length: ${Buffer.byteLength(bareBody)}\r\n\r\n${bareBody}`;
  const raw = () =>
    new Promise<void>((resolve) => {
      let got = '';
      const onData = (d: Buffer) => {
        got += d.toString('latin1');
        const head = got.indexOf('\r\n\r\n');
        if (head < 0) return;
        const length = Number(/content-length: *(\d+)/i.exec(got.slice(0, head))?.[1] ?? 0);
        if (got.length - head - 4 < length) return;
        socket.off('data', onData);
        resolve();
      };
      socket.on('data', onData);
      socket.write(rawRequest);
    });
  const handles = Array.from({ length: 10 }, (_, i) => `unknown-handle-${i}`);
  const operations: Record<string, (q: Queues) => Promise<unknown>> = {
    'SendMessageBatch (10)': (q) => q.dlq.send(handles.map((h) => ({ body: JSON.stringify({ jobId: h }) }))),
    'ReceiveMessage (empty)': (q) => q.queue.receive(10, 0),
    'ChangeMessageVisibilityBatch (10)': (q) => q.queue.changeVisibility(handles.map((receipt) => ({ receipt, seconds: 30 }))),
    'DeleteMessageBatch (10)': (q) => q.queue.delete(handles),
  };
  const cpu: Record<string, Record<string, number[]>> = {};
  const wall: Record<string, Record<string, number[]>> = {};
  // A first round untimed: connections, JIT (a few hundred calls are not enough for the first operation).
  for (let round = -1; round < ROUNDS; round++) {
    for (const [op, call] of Object.entries(operations)) {
      for (const name of [...Object.keys(transports), 'bare', 'undici', 'raw'] as const) {
        const one =
          name === 'bare'
            ? () => bare(bareBody)
            : name === 'undici'
              ? () => viaUndici(bareBody)
              : name === 'raw'
                ? raw
                : () => call(transports[name as keyof typeof transports]);
        if (round < 0) {
          for (let i = 0; i < CALLS; i++) await one();
          continue;
        }
        const c0 = process.cpuUsage();
        const t0 = performance.now();
        for (let i = 0; i < CALLS; i++) await one();
        const c = process.cpuUsage(c0);
        ((cpu[op] ??= {})[name] ??= []).push((c.user + c.system) / CALLS);
        ((wall[op] ??= {})[name] ??= []).push(((performance.now() - t0) * 1000) / CALLS);
      }
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const f = (n: number) => Math.round(n).toLocaleString('en-US');
  const out = [
    `Node ${process.version}, ${CALLS} calls per operation and transport, ${ROUNDS} rounds alternating; median (min–max) µs per call`,
    '',
    '| operation | SDK CPU | wire CPU | SDK ÷ wire | wire over node:http CPU | bare HTTP CPU | wire ÷ bare | bare undici CPU | raw socket CPU | SDK wall | wire wall |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const op of Object.keys(operations)) {
    const [s, w, n, b, u, r] = [cpu[op]!.sdk!, cpu[op]!.wire!, cpu[op]!.wireNode!, cpu[op]!.bare!, cpu[op]!.undici!, cpu[op]!.raw!];
    const range = (xs: number[]) => `${f(median(xs))} (${f(Math.min(...xs))}–${f(Math.max(...xs))})`;
    out.push(
      `| ${op} | ${range(s)} | ${range(w)} | ${(median(s) / median(w)).toFixed(1)}× | ${range(n)} | ${range(b)} | ${(median(w) / median(b)).toFixed(1)}× | ${range(u)} | ${range(r)} | ${f(median(wall[op]!.sdk!))} | ${f(median(wall[op]!.wire!))} |`,
    );
  }
  process.stdout.write(`${out.join('\n')}\n`);
  socket.destroy();
  await undiciPool.close();
} finally {
  sqs.child.kill('SIGTERM');
}
