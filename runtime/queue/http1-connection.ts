// One connection of the SQS hot path's HTTP/1.1 client (http1.ts): it writes a request and parses
// the answer (a status line, headers, then a body by Content-Length, chunked, or up to the close),
// and says when it is free for the next request or gone.

import net from 'node:net';
import tls from 'node:tls';

/** A connection that closed under a request, without an error of its socket's: retried as a reset (ECONNRESET). */
export class ConnectionClosed extends Error {
  override name = 'ConnectionClosed';
  readonly code = 'ECONNRESET';
}

export interface Http1Response {
  status: number;
  /** Lower-case names; a header sent more than once is joined with ", ". */
  headers: Record<string, string>;
  text: string;
}

export interface Pending {
  resolve(res: Http1Response): void;
  reject(err: Error): void;
}

const CRLF2 = Buffer.from('\r\n\r\n');

/** A connection and the parse of the answer it is waiting for. */
export class Connection {
  readonly socket: net.Socket;
  private pending: Pending | null = null;
  private buf: Buffer = Buffer.alloc(0);
  /** After the head: the answer's status and headers, and how its body ends. */
  private head: { status: number; headers: Record<string, string>; keepAlive: boolean } | null = null;
  /** Chunked: `left` bytes of the current chunk still to come (-1: its size line is next), then its CRLF. */
  private body: { kind: 'length'; left: number } | { kind: 'chunked'; left: number; crlf: boolean } | { kind: 'close' } | null = null;
  private chunks: Buffer[] = [];
  closed = false;
  idleTimer: NodeJS.Timeout | undefined;

  constructor(
    url: URL,
    tlsOptions: { ca?: string | Buffer } | undefined,
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
    if (this.closed || this.socket.destroyed) {
      // A write to a destroyed socket goes nowhere and says nothing: fail it now.
      pending.reject(new ConnectionClosed('the connection closed before the request was sent'));
      return;
    }
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
    p.reject(err ?? new ConnectionClosed('the connection closed before the response was complete'));
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
        else if (te !== undefined && /\bchunked\s*$/i.test(te)) this.body = { kind: 'chunked', left: -1, crlf: false };
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
      // Chunked: size line, data, CRLF … then a zero size, trailers and an empty line. The data is
      // taken as it arrives (a chunk of megabytes is not copied again with every packet).
      if (body.left > 0) {
        const take = Math.min(body.left, this.buf.length);
        if (take > 0) this.chunks.push(this.buf.subarray(0, take));
        this.buf = this.buf.subarray(take);
        body.left -= take;
        if (body.left > 0) return;
        body.crlf = true;
      }
      if (body.crlf) {
        if (this.buf.length < 2) return;
        if (this.buf[0] !== 13 || this.buf[1] !== 10) throw new Error('chunk data not followed by CRLF');
        this.buf = this.buf.subarray(2);
        body.crlf = false;
        body.left = -1;
      }
      const lineEnd = this.buf.indexOf('\r\n');
      if (lineEnd < 0) {
        if (this.buf.length > 4096) throw new Error('chunk size line longer than 4 KiB');
        return;
      }
      const sizeText = this.buf.toString('latin1', 0, lineEnd).split(';')[0]!.trim();
      if (!/^[0-9a-fA-F]{1,12}$/.test(sizeText)) throw new Error(`bad chunk size: ${JSON.stringify(sizeText.slice(0, 20))}`);
      const size = Number.parseInt(sizeText, 16);
      if (size > 0) {
        this.buf = this.buf.subarray(lineEnd + 2);
        body.left = size;
        continue;
      }
      // The last chunk: trailers (ignored) up to an empty line.
      const emptyTrailers = this.buf.length >= lineEnd + 4 && this.buf[lineEnd + 2] === 13 && this.buf[lineEnd + 3] === 10;
      const trailersEnd = emptyTrailers ? lineEnd : this.buf.indexOf(CRLF2, lineEnd);
      if (trailersEnd < 0) {
        if (this.buf.length > 65_536) throw new Error('HTTP trailers longer than 64 KiB');
        return;
      }
      this.buf = this.buf.subarray(trailersEnd + 4);
      this.complete(this.head!.keepAlive);
      return;
    }
  }

  private complete(reusable: boolean): void {
    const p = this.pending;
    const head = this.head!;
    const text = (this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks)).toString('utf8');
    this.pending = null;
    this.head = null;
    this.body = null;
    this.chunks = [];
    // Bytes beyond the answer: out of step, not reusable.
    if (reusable && this.buf.length === 0 && !this.closed) this.onFree(this);
    else this.socket.destroy();
    p?.resolve({ status: head.status, headers: head.headers, text });
  }
}
