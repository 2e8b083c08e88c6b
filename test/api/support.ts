// Helpers for the API tests: a real server on an ephemeral port, a request helper that returns
// status, headers and parsed JSON, and a logger that keeps its lines for assertions.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino, type Logger } from 'pino';
import { createApiServer, type ApiServerOptions } from '../../runtime/http/server.ts';

export interface TestServer {
  server: http.Server;
  url: string;
  port: number;
  close(): Promise<void>;
}

export async function startServer(opts: ApiServerOptions): Promise<TestServer> {
  const server = createApiServer(opts);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    server,
    port,
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

export interface Res<T = any> {
  status: number;
  headers: Headers;
  body: T;
}

export async function call<T = any>(
  base: string,
  method: string,
  path: string,
  opts: { json?: unknown; body?: string | Uint8Array; headers?: Record<string, string> } = {},
): Promise<Res<T>> {
  const headers: Record<string, string> = { ...(opts.json !== undefined ? { 'content-type': 'application/json' } : {}), ...opts.headers };
  const body = opts.json !== undefined ? JSON.stringify(opts.json) : opts.body;
  const r = await fetch(`${base}${path}`, { method, headers, ...(body !== undefined ? { body } : {}) });
  const text = await r.text();
  return { status: r.status, headers: r.headers, body: text ? JSON.parse(text) : undefined };
}

/**
 * A raw request with node:http, for what fetch will not do: stream a body in pieces, omit the
 * content length, or keep sending after the server has answered. Resolves with the response,
 * and tolerates the server closing the connection on an upload it refused.
 */
export function rawRequest(
  base: string,
  opts: { method: string; path: string; headers?: Record<string, string>; chunks: (Buffer | string)[]; gapMs?: number },
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: any }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: u.hostname, port: u.port, method: opts.method, path: opts.path, headers: opts.headers, agent: false },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (c: Buffer) => parts.push(c));
        res.on('end', () => {
          const text = Buffer.concat(parts).toString('utf8');
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text ? JSON.parse(text) : undefined });
        });
        res.on('error', reject);
      },
    );
    let answered = false;
    req.on('response', () => {
      answered = true;
    });
    req.on('error', (err) => {
      if (!answered) reject(err);
    });
    void (async () => {
      for (const c of opts.chunks) {
        if (answered || req.destroyed) return;
        await new Promise<void>((r) => req.write(c, () => r()));
        if (opts.gapMs) await new Promise((r) => setTimeout(r, opts.gapMs));
      }
      req.end();
    })().catch(() => undefined);
  });
}

/** A pino logger that keeps every line as an object. */
export function capturingLogger(): { log: Logger; lines: Record<string, any>[] } {
  const lines: Record<string, any>[] = [];
  const log = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  return { log, lines };
}
