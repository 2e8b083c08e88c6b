// A body far over the limit gets a readable 413 (issue 17, item 13): the server answers, then keeps
// reading and discarding the rest of the upload (up to a bound) before it closes the connection,
// so a plain node:http client that is still sending reads the 413 and its JSON reason instead of
// EPIPE or ECONNRESET; the next request, on a new connection, is served. The client runs in a
// process of its own, as an ERP's would: in this one, the server's and the client's turns of the
// event loop interleave and hide the race.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../runtime/observability/log.ts';
import { MAX_PAYLOAD_BYTES } from '../../runtime/store/client.ts';
import { createPlatform, type Platform } from '../support/platform.ts';
import { call, startServer, type TestServer } from './support.ts';

let p: Platform;
let api: TestServer;
beforeAll(async () => {
  p = await createPlatform();
  api = await startServer({ pool: p.db.pool, client: p.client, registry: p.registry, log: silentLogger });
});
afterAll(async () => {
  await api?.close();
  await p?.close();
});

/**
 * `tries` POSTs of a 5 MB job, each on a new connection, by a plain node:http client in a child
 * process: `whole` writes the body at once with its Content-Length, `chunked` in 64 KiB writes
 * without a length. Each answer, or the client's error code.
 */
async function postFiveMb(
  mode: 'whole' | 'chunked',
  tries: number,
): Promise<{ status?: number; headers?: any; body?: any; error?: string }[]> {
  const script = `
    import http from 'node:http';
    const [port, mode, tries] = process.argv.slice(1);
    const head = Buffer.from('{"type":"ledger.post","payload":{"batch":"B","entries":1,"pad":"');
    const body = Buffer.concat([head, Buffer.alloc(5 * 1024 * 1024, 'x'), Buffer.from('"}}')]);
    const out = [];
    for (let i = 0; i < Number(tries); i++) {
      out.push(await new Promise((resolve) => {
        const headers = { 'content-type': 'application/json', ...(mode === 'whole' ? { 'content-length': body.length } : { 'transfer-encoding': 'chunked' }) };
        const req = http.request({ host: '127.0.0.1', port: Number(port), method: 'POST', path: '/v1/jobs', agent: false, headers }, (res) => {
          const parts = [];
          res.on('data', (c) => parts.push(c));
          res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: JSON.parse(Buffer.concat(parts).toString('utf8')) }));
          res.on('error', (err) => resolve({ error: err.code ?? err.message }));
        });
        req.on('error', (err) => resolve({ error: err.code ?? err.message }));
        if (mode === 'whole') req.end(body);
        else (async () => {
          for (let o = 0; o < body.length; o += 65536) {
            if (!req.write(body.subarray(o, o + 65536))) await new Promise((r) => req.once('drain', r));
          }
          req.end();
        })().catch(() => undefined);
      }));
    }
    process.stdout.write(JSON.stringify(out));
  `;
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--input-type=module', '-e', script, String(api.port), mode, String(tries)],
    {
      maxBuffer: 1024 * 1024,
    },
  );
  return JSON.parse(stdout);
}

describe('a 5 MB POST /v1/jobs from a plain node:http client', () => {
  it('with its Content-Length: the client reads the 413 and its JSON reason, every time, and the next request succeeds', async () => {
    const answers = await postFiveMb('whole', 10);
    expect(answers.map((a) => a.error ?? a.status)).toEqual(Array(10).fill(413));
    for (const a of answers) {
      expect(a.body.error).toMatchObject({ code: 'payload_too_large', field: 'body' });
      expect(a.body.error.message).toMatch(
        new RegExp(`^body: is larger than ${2 * MAX_PAYLOAD_BYTES} bytes; a job payload may be at most`),
      );
      expect(a.headers.connection).toBe('close');
    }
    const next = await call(api.url, 'POST', '/v1/jobs', { json: { type: 'ledger.post', payload: { batch: 'AFTER-413', entries: 1 } } });
    expect(next.status).toBe(201);
  });

  it('chunked without a length, written 64 KiB at a time: the same', async () => {
    const answers = await postFiveMb('chunked', 10);
    expect(answers.map((a) => a.error ?? a.status)).toEqual(Array(10).fill(413));
    expect(answers[0]!.body.error).toMatchObject({ code: 'payload_too_large', field: 'body' });
    expect((await call(api.url, 'GET', '/healthz')).status).toBe(200);
  });
});

describe('the lingering close is bounded', () => {
  it('a client that never stops sending (a raw socket that ignores the answer) is cut off after about 16 MB', async () => {
    const script = `
      import net from 'node:net';
      const piece = Buffer.alloc(64 * 1024, 'x');
      // allowHalfOpen: our FIN after the answer does not end the client's sending side; it keeps writing.
      const sock = net.connect({ port: Number(process.argv[1]), host: '127.0.0.1', allowHalfOpen: true });
      let written = 0, answer = '', error = null, closed = false;
      sock.on('data', (c) => { answer += c.toString('latin1'); });
      sock.on('error', (err) => { error = err.code ?? err.message; });
      sock.on('close', () => { closed = true; });
      await new Promise((r) => sock.once('connect', r));
      sock.write('POST /v1/jobs HTTP/1.1\\r\\nhost: x\\r\\ncontent-type: application/json\\r\\ncontent-length: 209715200\\r\\n\\r\\n{"pad":"');
      const started = Date.now();
      // Up to 200 MB or 20 s: far past the bound, unless the server closes the connection first.
      while (!error && !closed && written < 200 * 1024 * 1024 && Date.now() - started < 20000) {
        if (!sock.write(piece)) await new Promise((r) => { sock.once('drain', r); sock.once('close', r); });
        written += piece.length;
      }
      process.stdout.write(JSON.stringify({ status: answer.split(' ')[1], written, ended: Boolean(error) || closed, ms: Date.now() - started }));
      process.exit(0);
    `;
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script, String(api.port)]);
    const r = JSON.parse(stdout);
    // The whole outcome in one assertion: a failure shows what was written, when and whether it ended.
    expect(r).toMatchObject({ status: '413', ended: true });
    // The bound (16 MB) plus what the sockets' buffers hold; far from the 200 MB offered.
    expect(r.written).toBeGreaterThan(2 * MAX_PAYLOAD_BYTES);
    expect(r.written).toBeLessThan(64 * 1024 * 1024);
  });
});
