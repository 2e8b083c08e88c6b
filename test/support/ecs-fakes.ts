// Fakes of what ECS gives a task: the agent's task-protection endpoint and the task metadata
// endpoint (v4), each a local HTTP server (test/runtime/task-protection.test.ts,
// deployment-watch.test.ts).
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface AgentCall {
  at: number;
  path: string;
  method: string;
  body: { ProtectionEnabled: boolean; ExpiresInMinutes?: number };
  status: number;
}

/** A fake ECS agent: records every request; `status()` decides each answer. */
export async function fakeAgent(): Promise<{ uri: string; calls: AgentCall[]; status: { next: () => number }; close(): Promise<void> }> {
  const calls: AgentCall[] = [];
  const status = { next: () => 200 };
  const server: Server = createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString()));
    req.on('end', () => {
      const code = status.next();
      calls.push({ at: Date.now(), path: req.url ?? '', method: req.method ?? '', body: JSON.parse(raw || '{}'), status: code });
      res.writeHead(code, { 'content-type': 'application/json' });
      res.end(
        code === 200 ? JSON.stringify({ protection: { ProtectionEnabled: true } }) : JSON.stringify({ error: { Code: 'ServerException' } }),
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    uri: `http://127.0.0.1:${port}`,
    calls,
    status,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

export const TASK_ID = '0123456789abcdef0123456789abcdef';

/** The task metadata endpoint (v4): GET /task answers `answer()`. */
export async function fakeMetadata(answer: () => { status: number; body: string } | 'hang') {
  const server: Server = createServer((req, res) => {
    const a = req.url === '/v4/abc/task' ? answer() : { status: 404, body: '{}' };
    if (a === 'hang') return;
    res.writeHead(a.status, { 'content-type': 'application/json' });
    res.end(a.body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    uri: `http://127.0.0.1:${port}/v4/abc`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
export const taskArn = {
  status: 200,
  body: JSON.stringify({ TaskARN: `arn:aws:ecs:eu-west-1:123456789012:task/ErpJobs-prod/${TASK_ID}` }),
};
