// An HTTP proxy in front of the local SQS endpoint for the benchmark: it adds a fixed delay to
// every call (an in-region SQS call costs ~10–20 ms; the emulator answers in well under one) and
// counts the calls by operation, so the benchmark can report SQS calls per job. Half the delay
// before the request goes on, half before the answer comes back, as on a network. A long poll
// keeps its own wait on top.
//
//   GET /__bench/calls  → {"ReceiveMessage": 120, "DeleteMessageBatch": 80, …} (not counted, not delayed)

import http from 'node:http';

export interface SqsProxy {
  endpoint: string;
  calls(): Record<string, number>;
  stop(): Promise<void>;
}

export async function startSqsProxy(upstream: string, delayMs: number): Promise<SqsProxy> {
  const target = new URL(upstream);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
  const calls: Record<string, number> = {};
  const half = delayMs / 2;
  const later = (ms: number, f: () => void) => (ms > 0 ? setTimeout(f, ms) : f());

  const server = http.createServer((req, res) => {
    if (req.url === '/__bench/calls') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(calls));
      return;
    }
    // AWS JSON protocol: the operation is the X-Amz-Target header ("AmazonSQS.ReceiveMessage").
    const op = String(req.headers['x-amz-target'] ?? 'other').replace(/^AmazonSQS\./, '');
    calls[op] = (calls[op] ?? 0) + 1;
    const body: Buffer[] = [];
    req.on('data', (d: Buffer) => body.push(d));
    req.on('end', () =>
      later(half, () => {
        const up = http.request(
          { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers, agent },
          (answer) => {
            const chunks: Buffer[] = [];
            answer.on('data', (d: Buffer) => chunks.push(d));
            answer.on('end', () =>
              later(half, () => {
                res.writeHead(answer.statusCode ?? 502, answer.headers);
                res.end(Buffer.concat(chunks));
              }),
            );
          },
        );
        up.on('error', (err) => {
          res.writeHead(502);
          res.end(String(err));
        });
        up.end(Buffer.concat(body));
      }),
    );
  });
  // A client that goes away mid-call (a worker killed, a long poll aborted) is not our error.
  server.on('clientError', (_err, socket) => socket.destroy());
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  return {
    endpoint: `http://127.0.0.1:${port}`,
    calls: () => ({ ...calls }),
    stop: () =>
      new Promise<void>((r) => {
        agent.destroy();
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** The calls a proxy has counted so far (from the benchmark's process). */
export async function proxyCalls(endpoint: string): Promise<Record<string, number>> {
  const res = await fetch(`${endpoint}/__bench/calls`);
  return (await res.json()) as Record<string, number>;
}

/** Calls made between two readings, and their total. */
export function callsBetween(a: Record<string, number>, b: Record<string, number>): { total: number; byOp: Record<string, number> } {
  const byOp: Record<string, number> = {};
  let total = 0;
  for (const [op, n] of Object.entries(b)) {
    const d = n - (a[op] ?? 0);
    if (d > 0) {
      byOp[op] = d;
      total += d;
    }
  }
  return { total, byOp };
}
