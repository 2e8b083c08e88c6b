// A keep-alive HTTP/1.1 client for the SQS hot path (sqs-wire.ts): POSTs with a body and a
// Content-Length, one request at a time per connection, each written in one write and its answer
// parsed as it arrives (http1-connection.ts: a status line, headers, then a body by Content-Length,
// chunked, or up to the close).
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

import { Connection, type Http1Response, type Pending } from './http1-connection.ts';

export { ConnectionClosed, type Http1Response } from './http1-connection.ts';

export interface Http1Options {
  /** Connections per origin at most (default 50, node:http's agent as the wire used it). */
  maxSockets?: number;
  /** An idle connection is closed after this long (default 30 s), before a server's idle timeout races a new request. */
  idleMs?: number;
  /** The certificates to trust instead of the system's (tests); the server's certificate and name are always verified. */
  tls?: { ca?: string | Buffer };
}

/** One origin's connections: idle ones, how many are open, and the requests waiting for one. */
interface Origin {
  idle: Connection[];
  open: number;
  waiting: ((handed: Connection | null) => void)[];
}

/** Keep-alive connections per origin, and the requests waiting for one. */
export class Http1Client {
  private readonly maxSockets: number;
  private readonly idleMs: number;
  private readonly tls: Http1Options['tls'];
  private readonly origins = new Map<string, Origin>();
  private readonly bySignal = new WeakMap<AbortSignal, UnderWay>();
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
    opts: { timeoutMs: number; signal?: AbortSignal | undefined } & PostErrors,
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
    // Aborted while the connection was on its way: nothing is sent, and the connection serves the next.
    if (opts.signal?.aborted) {
      this.free(origin, conn);
      throw opts.abortError();
    }
    return new Promise<Http1Response>((resolve, reject) => {
      const r = new InFlight(conn, resolve, reject, opts, this.underWay(opts.signal));
      r.timer = setTimeout(deadlinePassed, Math.max(0, deadline - Date.now()), r);
      conn.send(request, r);
    });
  }

  /**
   * The requests under way for `signal`, aborted together when it fires: one listener a signal
   * while it has requests (a worker's receives share its stop signal), not an add and a remove
   * on it every request. The listener goes with the signal's last request, so a signal made for
   * one call is not kept alive by it.
   */
  private underWay(signal: AbortSignal | undefined): UnderWay | null {
    if (!signal) return null;
    let u = this.bySignal.get(signal);
    if (!u) {
      u = new UnderWay(signal, () => this.bySignal.delete(signal));
      this.bySignal.set(signal, u);
    }
    return u;
  }

  /**
   * Close the idle connections; those under way close as their answers end, and no request is
   * sent after this (they reject).
   */
  destroy(): void {
    this.destroyed = true;
    for (const o of this.origins.values()) {
      for (const c of o.idle) c.socket.destroy();
      o.idle.length = 0;
    }
  }

  private origin(url: URL): Origin {
    const key = `${url.protocol}//${url.host}`;
    let o = this.origins.get(key);
    if (!o) {
      o = { idle: [], open: 0, waiting: [] };
      this.origins.set(key, o);
    }
    return o;
  }

  /**
   * A connection for the next request: an idle one, a new one while under the cap, else the next
   * one a finishing request hands over (or a slot a closed one leaves), in the order asked.
   */
  private async acquire(
    url: URL,
    o: Origin,
    deadline: number,
    opts: { signal?: AbortSignal | undefined } & PostErrors,
  ): Promise<Connection> {
    for (;;) {
      if (this.destroyed) throw new Error('Http1Client: destroyed');
      if (opts.signal?.aborted) throw opts.abortError();
      for (let c = o.idle.pop(); c; c = o.idle.pop()) {
        // Destroyed by its idle timer or the server's close, and its 'close' not yet come.
        if (!c.closed && !c.socket.destroyed) return c;
      }
      if (o.open < this.maxSockets) return this.connect(url, o);
      // Every connection busy: wait for one to be handed over, or a slot, within the deadline.
      const handed = await new Promise<Connection | null>((resolve, reject) => {
        const wake = (c: Connection | null) => {
          clearTimeout(timer);
          opts.signal?.removeEventListener('abort', onAbort);
          resolve(c);
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
      // Aborted (or destroyed) between the wake-up and now: what it was given goes to the next.
      if (opts.signal?.aborted || this.destroyed) {
        if (handed) this.free(o, handed);
        else if (o.open < this.maxSockets) o.waiting.shift()?.(null);
        continue;
      }
      // Handed over, then closed before this resumed: its 'close' wakes a waiter for its slot.
      if (handed && !handed.closed && !handed.socket.destroyed) return handed;
    }
  }

  private connect(url: URL, o: Origin): Connection {
    o.open++;
    try {
      return new Connection(
        url,
        this.tls,
        (c) => this.free(o, c),
        (c) => {
          o.open--;
          const i = o.idle.indexOf(c);
          if (i >= 0) o.idle.splice(i, 1);
          // A slot is free: the first waiter opens a connection.
          o.waiting.shift()?.(null);
        },
      );
    } catch (err) {
      o.open--;
      throw err;
    }
  }

  /** A connection whose answer is complete: to the first waiter, else idle until the next request or its idle time. */
  private free(o: Origin, c: Connection): void {
    if (this.destroyed || c.closed || c.socket.destroyed) {
      c.socket.destroy();
      return;
    }
    const waiter = o.waiting.shift();
    if (waiter) {
      waiter(c);
      return;
    }
    // Idle, it does not keep the process alive (send() refs it again).
    c.socket.unref();
    o.idle.push(c);
    clearTimeout(c.idleTimer);
    c.idleTimer = setTimeout(() => c.socket.destroy(), this.idleMs);
    c.idleTimer.unref();
  }
}

type PostErrors = { timeoutError: () => Error; abortError: () => Error };

/** A request sent and not yet answered: settles once, by its answer, its connection's end, its deadline or its caller's abort. */
class InFlight implements Pending {
  timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly conn: Connection,
    private readonly ok: (res: Http1Response) => void,
    private readonly fail: (err: Error) => void,
    private readonly errors: PostErrors,
    private readonly underWay: UnderWay | null,
  ) {
    underWay?.add(this);
  }

  resolve(res: Http1Response): void {
    this.done();
    this.ok(res);
  }

  reject(err: Error): void {
    this.done();
    this.fail(err);
  }

  /** The deadline passed: the connection goes, and the request rejects with the caller's timeout error. */
  expire(): void {
    this.conn.abort(this.errors.timeoutError());
  }

  abort(): void {
    this.conn.abort(this.errors.abortError());
  }

  private done(): void {
    clearTimeout(this.timer);
    this.underWay?.remove(this);
  }
}

/** One signal's requests under way, and its one 'abort' listener while there are any. */
class UnderWay {
  private readonly requests = new Set<InFlight>();
  private readonly onAbort = () => {
    for (const r of this.requests) r.abort();
  };

  constructor(
    private readonly signal: AbortSignal,
    private readonly emptied: () => void,
  ) {
    signal.addEventListener('abort', this.onAbort, { once: true });
  }

  add(r: InFlight): void {
    this.requests.add(r);
  }

  remove(r: InFlight): void {
    this.requests.delete(r);
    if (this.requests.size > 0) return;
    this.signal.removeEventListener('abort', this.onAbort);
    this.emptied();
  }
}

/** setTimeout's callback for every request (the request its argument): no closure a request. */
function deadlinePassed(r: InFlight): void {
  r.expire();
}
