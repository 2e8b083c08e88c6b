// A keep-alive HTTP/1.1 client for the SQS hot path (sqs-wire.ts): POSTs with a body and a
// Content-Length, one request at a time per connection, each written in one write and its answer
// parsed here (a status line, headers, then a body by Content-Length, chunked, or up to the close).
// Why: per call Node's HTTP client (node:http, its agent, events and streams) cost more than
// everything else the worker does for a message on the SQS path: a bare request to the local
// endpoint took 85–90 µs of CPU through node:http against 37–43 µs written and read on the socket
// (bench/sqs-call-cost.ts), and every job pays for about 0.2 calls.
//
// What it keeps of node:http's agent: keep-alive connections per origin, at most `maxSockets` of
// them (requests beyond wait for one), TLS with the system's CAs and SNI for https, TCP keep-alive
// and no Nagle delay; a connection the server closes while idle is dropped, one answered with
// `Connection: close` (or HTTP/1.0 without keep-alive) is not reused, and idle ones do not keep
// the process alive. Errors carry the socket's code (ECONNRESET, ECONNREFUSED, EPIPE, ETIMEDOUT,
// ENOTFOUND …), and a connection that closes before its answer is complete fails with ECONNRESET,
// so the wire's retry rules (sqs-wire-errors.ts retryKind) see what they saw from node:http.
// What it does not do, and the hot path never needs: methods other than POST, request streaming,
// pipelining, redirects, proxies, compression, informational answers other than skipped 1xx.
// JOBS_SQS_HTTP_CLIENT=node sends through node:http instead (runtime/config/sqs.ts).

import net from 'node:net';
import tls from 'node:tls';

export interface Http1Response {
  status: number;
  /** Lower-case names; a header sent more than once is joined with ", ". */
  headers: Record<string, string>;
  text: string;
}

export interface Http1Options {
  /** Connections per origin at most (default 50, node:http's agent as the wire used it). */
  maxSockets?: number;
  /** An idle connection is closed after this long (default 30 s), before a server's idle timeout races a new request. */
  idleMs?: number;
  /** Certificates to trust beyond the system's (tests); the server's certificate and name are always verified. */
  tls?: { ca?: string | Buffer };
}

interface Pending {
  resolve(res: Http1Response): void;
  reject(err: Error): void;
}

const CRLF2 = Buffer.from('\r\n\r\n');

/** A connection and the parse of the answer it is waiting for. */
class Connection {
  readonly socket: net.Socket;
  private pending: Pending | null = null;
  private buf: Buffer = Buffer.alloc(0);
  /** After the head: the answer's status and headers, and how its body ends. */
  private head: { status: number; headers: Record<string, string>; keepAlive: boolean } | null = null;
  private body: { kind: 'length'; left: number } | { kind: 'chunked' } | { kind: 'close' } | null = null;
  private chunks: Buffer[] = [];
  closed = false;
  idleTimer: NodeJS.Timeout | undefined;

  constructor(
    url: URL,
    tlsOptions: Http1Options['tls'],
    private readonly onFree: (c: Connection) => void,
    private readonly onGone: (c: Connection) => void,
  ) {
    const port = Number(url.port) || (url.protocol === 'https:' ? 443 : 80);
    const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
    this.socket =
      url.protocol === 'https:'
        ? tls.connect({ ...tlsOptions, host, port, servername: net.isIP(host) ? undefined : host, ALPNProtocols: ['http/1.1'] })
        : net.connect({ host, port });
    this.socket.setNoDelay(true);
    this.socket.setKeepAlive(true, 60_000);
    this.socket.on('data', (d: Buffer) => this.data(d));
    this.socket.on('error', (err) => this.gone(err));
    this.socket.on('close', () => this.gone(null));
    // The server ended its side: an answer read up to the close is complete; any other ends here.
    this.socket.on('end', () => {
      if (this.body?.kind === 'close') this.complete(false);
      this.socket.destroy();
    });
  }

  send(request: string, pending: Pending): void {
    clearTimeout(this.idleTimer);
    this.socket.ref();
    this.pending = pending;
    this.socket.write(request);
  }

  /** Abandon the request under way (its deadline, its caller's abort): the connection goes with it. */
  abort(err: Error): void {
    const p = this.pending;
    this.pending = null;
    this.socket.destroy();
    p?.reject(err);
  }

  private gone(err: Error | null): void {
    if (!this.closed) {
      this.closed = true;
      clearTimeout(this.idleTimer);
      this.socket.destroy();
      this.onGone(this);
    }
    const p = this.pending;
    if (!p) return;
    this.pending = null;
    p.reject(
      err ??
        Object.assign(new Error('the connection closed before the response was complete'), {
          code: 'ECONNRESET',
        }),
    );
  }

  private data(d: Buffer): void {
    if (!this.pending) {
      // Bytes nobody asked for: the connection is out of step; it goes.
      this.socket.destroy();
      return;
    }
    this.buf = this.buf.length === 0 ? d : Buffer.concat([this.buf, d]);
    try {
      this.parse();
    } catch (err) {
      this.abort(Object.assign(err as Error, { code: 'HPE_INVALID' }));
    }
  }

  private parse(): void {
    for (;;) {
      if (!this.head) {
        const end = this.buf.indexOf(CRLF2);
        if (end < 0) {
          if (this.buf.length > 65_536) throw new Error('HTTP response head longer than 64 KiB');
          return;
        }
        const lines = this.buf.toString('latin1', 0, end).split('\r\n');
        this.buf = this.buf.subarray(end + 4);
        const m = /^HTTP\/1\.([01]) (\d{3})(?: |$)/.exec(lines[0]!);
        if (!m) throw new Error(`not an HTTP/1.x status line: ${JSON.stringify(lines[0]!.slice(0, 100))}`);
        const status = Number(m[2]);
        const headers: Record<string, string> = {};
        for (let i = 1; i < lines.length; i++) {
          const line = lines[i]!;
          const colon = line.indexOf(':');
          if (colon <= 0) throw new Error(`malformed HTTP header line: ${JSON.stringify(line.slice(0, 100))}`);
          const name = line.slice(0, colon).trim().toLowerCase();
          const value = line.slice(colon + 1).trim();
          headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
        }
        // 100 Continue, 103 Early Hints: the answer follows.
        if (status >= 100 && status < 200) continue;
        const connection = (headers.connection ?? '').toLowerCase();
        const keepAlive = m[1] === '1' ? !/\bclose\b/.test(connection) : /\bkeep-alive\b/.test(connection);
        this.head = { status, headers, keepAlive };
        const te = headers['transfer-encoding'];
        const length = headers['content-length'];
        if (status === 204 || status === 304) this.body = { kind: 'length', left: 0 };
        else if (te !== undefined && /\bchunked\s*$/i.test(te)) this.body = { kind: 'chunked' };
        else if (length !== undefined) {
          if (!/^\d+$/.test(length)) throw new Error(`bad Content-Length: ${JSON.stringify(length)}`);
          this.body = { kind: 'length', left: Number(length) };
        } else this.body = { kind: 'close' };
      }
      const body = this.body!;
      if (body.kind === 'close') {
        if (this.buf.length > 0) this.chunks.push(this.buf);
        this.buf = Buffer.alloc(0);
        return;
      }
      if (body.kind === 'length') {
        const take = Math.min(body.left, this.buf.length);
        if (take > 0) this.chunks.push(this.buf.subarray(0, take));
        this.buf = this.buf.subarray(take);
        body.left -= take;
        if (body.left > 0) return;
        this.complete(this.head!.keepAlive);
        return;
      }
      // Chunked: size line, data, CRLF … then a zero size, trailers and an empty line.
      const lineEnd = this.buf.indexOf('\r\n');
      if (lineEnd < 0) return;
      const sizeText = this.buf.toString('latin1', 0, lineEnd).split(';')[0]!.trim();
      if (!/^[0-9a-fA-F]+$/.test(sizeText)) throw new Error(`bad chunk size: ${JSON.stringify(sizeText.slice(0, 20))}`);
      const size = Number.parseInt(sizeText, 16);
      if (size === 0) {
        const trailersEnd = this.buf.indexOf(CRLF2, lineEnd);
        const emptyTrailers = this.buf.length >= lineEnd + 4 && this.buf.toString('latin1', lineEnd, lineEnd + 4) === '\r\n\r\n';
        if (!emptyTrailers && trailersEnd < 0) return;
        this.buf = this.buf.subarray(emptyTrailers ? lineEnd + 4 : trailersEnd + 4);
        this.complete(this.head!.keepAlive);
        return;
      }
      if (this.buf.length < lineEnd + 2 + size + 2) return;
      this.chunks.push(this.buf.subarray(lineEnd + 2, lineEnd + 2 + size));
      this.buf = this.buf.subarray(lineEnd + 2 + size + 2);
    }
  }

  private complete(reusable: boolean): void {
    const p = this.pending;
    const head = this.head!;
    const text = Buffer.concat(this.chunks).toString('utf8');
    this.pending = null;
    this.head = null;
    this.body = null;
    this.chunks = [];
    // Bytes beyond the answer: out of step, not reusable.
    if (reusable && this.buf.length === 0 && !this.closed) {
      this.socket.unref();
      this.onFree(this);
    } else this.socket.destroy();
    p?.resolve({ status: head.status, headers: head.headers, text });
  }
}

/** Keep-alive connections per origin, and the requests waiting for one. */
export class Http1Client {
  private readonly maxSockets: number;
  private readonly idleMs: number;
  private readonly tls: Http1Options['tls'];
  private readonly origins = new Map<string, { idle: Connection[]; open: number; waiting: (() => void)[] }>();
  private destroyed = false;

  constructor(o: Http1Options = {}) {
    this.maxSockets = o.maxSockets ?? 50;
    this.idleMs = o.idleMs ?? 30_000;
    this.tls = o.tls;
  }

  /**
   * POST `body` to `url` (its origin; the path is /) with `headers` (Host and Content-Length are
   * added when absent). Rejects on the connection's error, `timeoutMs` without a complete answer
   * (ETIMEDOUT), or `signal`'s abort (`abortError()`); the connection then goes.
   */
  async post(
    url: URL,
    headers: Record<string, string>,
    body: string,
    opts: { timeoutMs: number; signal?: AbortSignal | undefined; timeoutError: () => Error; abortError: () => Error },
  ): Promise<Http1Response> {
    if (this.destroyed) throw new Error('Http1Client: destroyed');
    let head = 'POST / HTTP/1.1\r\n';
    if (headers.host === undefined) head += `host: ${url.host}\r\n`;
    if (headers['content-length'] === undefined) head += `content-length: ${Buffer.byteLength(body)}\r\n`;
    for (const name in headers) head += `${name}: ${headers[name]}\r\n`;
    const request = `${head}\r\n${body}`;
    const deadline = Date.now() + opts.timeoutMs;
    const origin = this.origin(url);
    // Waiting for a free connection counts against the deadline and the abort too.
    const conn = await this.acquire(url, origin, deadline, opts);
    return new Promise<Http1Response>((resolve, reject) => {
      const timer = setTimeout(() => conn.abort(opts.timeoutError()), Math.max(0, deadline - Date.now()));
      const onAbort = () => conn.abort(opts.abortError());
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      const done = () => {
        clearTimeout(timer);
        opts.signal?.removeEventListener('abort', onAbort);
      };
      conn.send(request, {
        resolve: (res) => {
          done();
          resolve(res);
        },
        reject: (err) => {
          done();
          reject(err);
        },
      });
      // Aborted while the connection was being found: its 'abort' has fired already.
      if (opts.signal?.aborted) onAbort();
    });
  }

  /** Close every connection, idle or not (requests under way fail with ECONNRESET). */
  destroy(): void {
    this.destroyed = true;
    for (const o of this.origins.values()) {
      for (const c of o.idle) c.socket.destroy();
      o.idle.length = 0;
    }
  }

  private origin(url: URL) {
    const key = `${url.protocol}//${url.host}`;
    let o = this.origins.get(key);
    if (!o) {
      o = { idle: [], open: 0, waiting: [] };
      this.origins.set(key, o);
    }
    return o;
  }

  private async acquire(
    url: URL,
    o: { idle: Connection[]; open: number; waiting: (() => void)[] },
    deadline: number,
    opts: { signal?: AbortSignal | undefined; timeoutError: () => Error; abortError: () => Error },
  ): Promise<Connection> {
    for (;;) {
      if (opts.signal?.aborted) throw opts.abortError();
      const idle = o.idle.pop();
      if (idle) return idle;
      if (o.open < this.maxSockets) {
        o.open++;
        return new Connection(
          url,
          this.tls,
          (c) => this.free(o, c),
          (c) => {
            o.open--;
            const i = o.idle.indexOf(c);
            if (i >= 0) o.idle.splice(i, 1);
            o.waiting.shift()?.();
          },
        );
      }
      // Every connection busy: wait for one to free or close, within the deadline.
      await new Promise<void>((resolve, reject) => {
        const wake = () => {
          clearTimeout(timer);
          opts.signal?.removeEventListener('abort', onAbort);
          resolve();
        };
        const leave = (err: Error) => {
          const i = o.waiting.indexOf(wake);
          if (i >= 0) o.waiting.splice(i, 1);
          clearTimeout(timer);
          opts.signal?.removeEventListener('abort', onAbort);
          reject(err);
        };
        const timer = setTimeout(() => leave(opts.timeoutError()), Math.max(0, deadline - Date.now()));
        const onAbort = () => leave(opts.abortError());
        opts.signal?.addEventListener('abort', onAbort, { once: true });
        o.waiting.push(wake);
      });
    }
  }

  private free(o: { idle: Connection[]; waiting: (() => void)[] }, c: Connection): void {
    if (this.destroyed) {
      c.socket.destroy();
      return;
    }
    o.idle.push(c);
    clearTimeout(c.idleTimer);
    c.idleTimer = setTimeout(() => c.socket.destroy(), this.idleMs);
    c.idleTimer.unref();
    o.waiting.shift()?.();
  }
}
