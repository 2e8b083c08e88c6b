// The platform's HTTP/1.1 client for the SQS hot path (runtime/queue/http1.ts), against Node's
// own HTTP server and against raw sockets that answer what a server, a load balancer or a broken
// network can: keep-alive reuse and its cap, chunked and read-until-close bodies, informational
// answers, `Connection: close`, a server closing idle connections, resets mid-answer, deadlines,
// aborts, garbage, and TLS that verifies the server's certificate.
import { execFile } from 'node:child_process';
import { getEventListeners } from 'node:events';
import { promisify } from 'node:util';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { Http1Client } from '../../runtime/queue/http1.ts';
import { makeCertificates } from '../support/certificates.ts';

const closers: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

const errors = {
  timeoutError: () => Object.assign(new Error('no answer in time'), { code: 'ETIMEDOUT' }),
  abortError: () => Object.assign(new Error('Request aborted'), { name: 'AbortError' }),
};
const opts = (timeoutMs = 5000, signal?: AbortSignal) => ({ timeoutMs, signal, ...errors });

function client(o: ConstructorParameters<typeof Http1Client>[0] = {}): Http1Client {
  const c = new Http1Client(o);
  closers.push(() => c.destroy());
  return c;
}

/** Node's HTTP server, counting the connections it accepted. */
async function nodeServer(handler: http.RequestListener, tune?: (s: http.Server) => void) {
  const server = http.createServer(handler);
  tune?.(server);
  let connections = 0;
  server.on('connection', () => connections++);
  const url = new URL(`http://127.0.0.1:${await listen(server)}`);
  return { url, connections: () => connections };
}

/** Listen on a free port of 127.0.0.1, closed (its connections too) after the test. */
async function listen(server: http.Server | https.Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(
    () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  );
  return (server.address() as net.AddressInfo).port;
}

/** A raw TCP server: `onRequest` gets each socket once a whole request head and body arrived. */
async function rawServer(onRequest: (socket: net.Socket, request: string) => unknown) {
  const sockets = new Set<net.Socket>();
  let connections = 0;
  const server = net.createServer((socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    let buf = '';
    socket.on('data', (d) => {
      buf += d.toString('latin1');
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const length = Number(/content-length: (\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
      if (buf.length < end + 4 + length) return;
      const request = buf.slice(0, end + 4 + length);
      buf = buf.slice(end + 4 + length);
      void onRequest(socket, request);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(
    () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  );
  return { url: new URL(`http://127.0.0.1:${(server.address() as net.AddressInfo).port}`), sockets, connections: () => connections };
}

const echo: http.RequestListener = (req, res) => {
  let body = '';
  req.on('data', (d) => (body += d));
  req.on('end', () => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ method: req.method, url: req.url, host: req.headers.host, target: req.headers['x-target'], body }));
  });
};

describe('Http1Client', () => {
  it('POSTs the body with Host and Content-Length, and reuses one keep-alive connection', async () => {
    const s = await nodeServer(echo);
    const c = client();
    for (let i = 0; i < 20; i++) {
      const res = await c.post(s.url, { 'x-target': 'AmazonSQS.ReceiveMessage' }, `{"n":${i},"é":"ü"}`, opts());
      expect(res.status).toBe(200);
      expect(res.headers['content-type']).toBe('application/json');
      expect(JSON.parse(res.text)).toEqual({
        method: 'POST',
        url: '/',
        host: s.url.host,
        target: 'AmazonSQS.ReceiveMessage',
        body: `{"n":${i},"é":"ü"}`,
      });
    }
    expect(s.connections()).toBe(1);
  });

  it('opens at most maxSockets connections; the requests beyond wait for one and are all answered', async () => {
    const s = await nodeServer((req, res) => setTimeout(() => echo(req, res), 20));
    const c = client({ maxSockets: 2 });
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => c.post(s.url, {}, String(i), opts())));
    expect(answers.map((a) => JSON.parse(a.text).body)).toEqual(['0', '1', '2', '3', '4', '5', '6', '7']);
    expect(s.connections()).toBe(2);
  });

  it('reads a chunked body (a large one, its multi-byte characters split between chunks) and a body up to the close', async () => {
    const big = 'ü'.repeat(300_000);
    const s = await nodeServer((_req, res) => {
      // No Content-Length: Node sends it chunked; odd slices split the two-byte characters.
      const bytes = Buffer.from(big);
      for (let i = 0; i < bytes.length; i += 7777) res.write(bytes.subarray(i, i + 7777));
      res.end();
    });
    const c = client();
    expect((await c.post(s.url, {}, '', opts())).text).toBe(big);
    expect((await c.post(s.url, {}, '', opts())).text).toBe(big);
    expect(s.connections()).toBe(1);

    const raw = await rawServer((socket) => socket.end('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the close'));
    expect((await c.post(raw.url, {}, 'x', opts())).text).toBe('until the close');
  });

  it('skips an informational answer (100 Continue) and reads the one that follows', async () => {
    const raw = await rawServer((socket) =>
      socket.write('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-a: 1\r\nx-a: 2\r\n\r\nok'),
    );
    const res = await client().post(raw.url, {}, 'x', opts());
    expect(res).toEqual({ status: 200, headers: { 'content-length': '2', 'x-a': '1, 2' }, text: 'ok' });
  });

  it('does not reuse a connection answered with Connection: close, nor one the server closed while idle', async () => {
    const s = await nodeServer((req, res) => {
      if (req.headers['x-close']) res.setHeader('connection', 'close');
      echo(req, res);
    });
    const c = client();
    await c.post(s.url, { 'x-close': '1' }, 'a', opts());
    await c.post(s.url, {}, 'b', opts());
    expect(s.connections()).toBe(2);
    // A server (or a load balancer) that closes a keep-alive connection 50 ms after its answer:
    // the next request opens another, no error.
    const raw = await rawServer((socket) => {
      socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
      setTimeout(() => socket.end(), 50);
    });
    for (let i = 0; i < 3; i++) {
      expect((await c.post(raw.url, {}, String(i), opts())).text).toBe('ok');
      await new Promise((r) => setTimeout(r, 150));
    }
    expect(raw.connections()).toBe(3);
  });

  it('a connection reset in the middle of an answer rejects with ECONNRESET; the next request gets a fresh connection', async () => {
    let n = 0;
    const raw = await rawServer((socket) => {
      if (n++ === 0) {
        socket.write('HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part of it');
        setTimeout(() => socket.resetAndDestroy(), 20);
      } else socket.write('HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nwhole');
    });
    const c = client();
    await expect(c.post(raw.url, {}, 'x', opts())).rejects.toMatchObject({ code: 'ECONNRESET' });
    expect((await c.post(raw.url, {}, 'x', opts())).text).toBe('whole');
  });

  it('a server that closes without a word, and one that refuses connections, reject with their codes', async () => {
    const raw = await rawServer((socket) => socket.end());
    await expect(client().post(raw.url, {}, 'x', opts())).rejects.toMatchObject({
      code: 'ECONNRESET',
      message: 'the connection closed before the response was complete',
    });
    const closed = await rawServer(() => undefined);
    const port = closed.url.port;
    await closers.pop()!();
    await expect(client().post(new URL(`http://127.0.0.1:${port}`), {}, 'x', opts())).rejects.toMatchObject({ code: 'ECONNREFUSED' });
  });

  it('gives up at its deadline and on its abort, closing that connection', async () => {
    const raw = await rawServer(() => undefined); // never answers
    const c = client();
    await expect(c.post(raw.url, {}, 'x', opts(100))).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    const ac = new AbortController();
    const pending = c.post(raw.url, {}, 'x', opts(5000, ac.signal));
    setTimeout(() => ac.abort(), 50);
    await expect(pending).rejects.toMatchObject({ name: 'AbortError' });
    await new Promise((r) => setTimeout(r, 50));
    expect(raw.sockets.size).toBe(0);
    // Waiting for a connection counts too: with the only one busy, a second request times out waiting.
    const one = client({ maxSockets: 1 });
    const busy = one.post(raw.url, {}, 'x', opts(300)).catch((e: unknown) => e);
    await expect(one.post(raw.url, {}, 'y', opts(100))).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    await busy;
  });

  it('one signal shared by many requests (a worker stop): one listener on it while they are under way, none after, and its abort stops every request under way', async () => {
    const raw = await rawServer((socket, request) => {
      // "hold" is never answered; anything else at once.
      if (!request.endsWith('hold')) socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
    });
    const c = client();
    const ac = new AbortController();
    for (let i = 0; i < 50; i++) expect((await c.post(raw.url, {}, 'quick', opts(5000, ac.signal))).text).toBe('ok');
    // None under way: no listener left on it (a signal made for one call is not kept alive).
    expect(getEventListeners(ac.signal, 'abort')).toHaveLength(0);
    const held = [1, 2, 3].map(() => c.post(raw.url, {}, 'hold', opts(5000, ac.signal)).catch((e: unknown) => e));
    await new Promise((r) => setTimeout(r, 50));
    expect(getEventListeners(ac.signal, 'abort')).toHaveLength(1);
    ac.abort();
    for (const e of await Promise.all(held)) expect(e).toMatchObject({ name: 'AbortError' });
    // A request with the fired signal is refused before it is sent; another signal still works.
    await expect(c.post(raw.url, {}, 'quick', opts(5000, ac.signal))).rejects.toMatchObject({ name: 'AbortError' });
    expect((await c.post(raw.url, {}, 'quick', opts(5000, new AbortController().signal))).text).toBe('ok');
  });

  it('reads trailers after the last chunk, and HTTP/1.0 answers (kept alive only when they say so)', async () => {
    const raw = await rawServer((socket, request) => {
      const n = /\r\n\r\n(.*)$/s.exec(request)![1];
      if (n === 'trailers') socket.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nx-checksum: 1\r\n\r\n');
      else if (n === 'old-keep') socket.write('HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 4\r\n\r\nkeep');
      else socket.write('HTTP/1.0 200 OK\r\ncontent-length: 4\r\n\r\nonce');
    });
    const c = client();
    expect((await c.post(raw.url, {}, 'trailers', opts())).text).toBe('abc');
    expect((await c.post(raw.url, {}, 'old-keep', opts())).text).toBe('keep');
    expect(raw.connections()).toBe(1);
    expect((await c.post(raw.url, {}, 'old', opts())).text).toBe('once');
    expect((await c.post(raw.url, {}, 'trailers', opts())).text).toBe('abc');
    expect(raw.connections()).toBe(2);
  });

  it('parses answers that arrive a byte at a time (chunked with an extension and trailers, and by length)', async () => {
    const answers = [
      'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nü\r\n0\r\nx: y\r\n\r\n',
      'HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nwxyz',
      'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
    ];
    let n = 0;
    const raw = await rawServer(async (socket) => {
      socket.setNoDelay(true);
      for (const byte of Buffer.from(answers[n++]!)) {
        socket.write(Buffer.from([byte]));
        await new Promise((r) => setImmediate(r));
      }
    });
    const c = client();
    expect((await c.post(raw.url, {}, '1', opts())).text).toBe('abcü');
    expect((await c.post(raw.url, {}, '2', opts())).text).toBe('wxyz');
    expect((await c.post(raw.url, {}, '3', opts())).text).toBe('abc');
    expect(raw.connections()).toBe(1);
  });

  it('does not reuse a connection that sent more than the answer asked for (two answers in one packet)', async () => {
    const raw = await rawServer((socket) =>
      socket.write(
        'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale',
      ),
    );
    const c = client();
    expect((await c.post(raw.url, {}, '1', opts())).text).toBe('ok');
    expect((await c.post(raw.url, {}, '2', opts())).text).toBe('ok');
    expect(raw.connections()).toBe(2);
  });

  it("hands a freed connection to the requests waiting, in the order they asked, and a closed one's slot too", async () => {
    let n = 0;
    const raw = await rawServer((socket, request) => {
      // The first request's connection is reset: the waiting ones must not wait for a free one in vain.
      if (n++ === 0) socket.resetAndDestroy();
      else setTimeout(() => socket.write(`HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n${request.at(-1)}`), 5);
    });
    const c = client({ maxSockets: 1 });
    const order: string[] = [];
    const first = c.post(raw.url, {}, 'x', opts()).catch((e: { code?: string }) => e.code);
    const rest = ['a', 'b', 'c', 'd'].map((b) => c.post(raw.url, {}, b, opts()).then((r) => order.push(r.text)));
    expect(await first).toBe('ECONNRESET');
    await Promise.all(rest);
    expect(order).toEqual(['a', 'b', 'c', 'd']);
    expect(raw.connections()).toBe(2);
  });

  it('a request aborted while it waits for a connection leaves the queue, and the connection serves the next', async () => {
    let answer: (() => void) | null = null;
    let requests = 0;
    const raw = await rawServer((socket) => {
      const ok = () => socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
      // The first is held until the test answers it; the next is answered at once.
      if (requests++ === 0) answer = ok;
      else ok();
    });
    const c = client({ maxSockets: 1 });
    const busy = c.post(raw.url, {}, '1', opts());
    const ac = new AbortController();
    const waiting = c.post(raw.url, {}, '2', opts(5000, ac.signal));
    const after = c.post(raw.url, {}, '3', opts());
    ac.abort();
    await expect(waiting).rejects.toMatchObject({ name: 'AbortError' });
    await vi.waitFor(() => expect(answer).not.toBeNull());
    answer!();
    expect((await busy).text).toBe('ok');
    expect((await after).text).toBe('ok');
    // The aborted request was never sent.
    expect(requests).toBe(2);
    expect(raw.connections()).toBe(1);
  });

  it('drops an idle connection that receives bytes nobody asked for', async () => {
    const raw = await rawServer((socket) => {
      socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
      setTimeout(() => socket.write('HTTP/1.1 200 OK\r\n'), 20);
    });
    const c = client();
    expect((await c.post(raw.url, {}, 'x', opts())).text).toBe('ok');
    await new Promise((r) => setTimeout(r, 80));
    expect((await c.post(raw.url, {}, 'y', opts())).text).toBe('ok');
    expect(raw.connections()).toBe(2);
  });

  it('idle connections do not keep a process alive: it exits once its work is done', async () => {
    const s = await nodeServer(echo);
    const script = `import { Http1Client } from ${JSON.stringify(new URL('../../runtime/queue/http1.ts', import.meta.url).pathname)};
const c = new Http1Client();
const o = { timeoutMs: 5000, timeoutError: () => new Error('t'), abortError: () => new Error('a') };
const r = await c.post(new URL(${JSON.stringify(s.url.href)}), {}, 'bye', o);
process.stdout.write(JSON.parse(r.text).body);`;
    const t0 = Date.now();
    // Not execFileSync: this process's server must answer meanwhile.
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      timeout: 20_000,
    });
    expect(stdout).toBe('bye');
    // Well before the 30 s an idle connection is kept.
    expect(Date.now() - t0).toBeLessThan(15_000);
  });

  it('rejects garbage instead of a status line, a bad Content-Length and a bad chunk size', async () => {
    for (const answer of [
      'SMTP 220 hello\r\n\r\n',
      'HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n',
      'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n',
    ]) {
      const raw = await rawServer((socket) => socket.write(answer));
      await expect(client().post(raw.url, {}, 'x', opts()), answer).rejects.toMatchObject({ code: 'HPE_INVALID' });
    }
  });
});

describe('Http1Client over TLS', () => {
  const dir = mkdtempSync(join(tmpdir(), 'http1-tls-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const certs = makeCertificates(dir);

  async function tlsServer() {
    return listen(https.createServer({ key: readFileSync(certs.keyFile), cert: readFileSync(certs.certFile) }, echo));
  }

  it('refuses a server whose certificate no trusted CA signed', async () => {
    const port = await tlsServer();
    await expect(client().post(new URL(`https://localhost:${port}`), {}, 'x', opts())).rejects.toMatchObject({
      code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
    });
  });

  it('speaks to a server its CAs trust, by name (SNI), over one connection', async () => {
    const port = await tlsServer();
    const c = client({ tls: { ca: readFileSync(certs.caFile) } });
    for (const body of ['a', 'b']) {
      const res = await c.post(new URL(`https://localhost:${port}`), {}, body, opts());
      expect(JSON.parse(res.text)).toMatchObject({ host: `localhost:${port}`, body });
    }
    // Another name than the certificate's: refused.
    await expect(c.post(new URL(`https://127.0.0.1:${port}`), {}, 'x', opts())).rejects.toMatchObject({
      code: 'ERR_TLS_CERT_ALTNAME_INVALID',
    });
  });
});
