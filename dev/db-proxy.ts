// A TCP proxy between the local stack's services and PostgreSQL that can fail over: every open
// connection is reset (RST, as a task sees when the primary dies or a NAT/ENI mapping is lost)
// and, for the outage, every new connection is reset as soon as it is accepted (the services
// see ECONNRESET / "Connection terminated" at connect, as while RDS Multi-AZ promotes the
// standby). Then it forwards again. Or it stalls them: open, silent, never reset (stall()). Local only: the chaos run, the live view's
// "database failover" button and the failover tests drive it; the CLI's `.jobs-local/env`
// keeps the direct address so an operator's command is not caught in an injected outage.

import net from 'node:net';

export interface DbProxy {
  /** The port the services connect to (127.0.0.1). */
  readonly port: number;
  /** `url` with its host and port replaced by the proxy's. */
  url(databaseUrl: string): string;
  /** Reset every connection now and refuse new ones for `seconds`. Resolves when the outage starts. */
  failover(seconds: number): { endsAt: number; reset: number; over: Promise<void> };
  /**
   * Every open connection goes silent and stays open: the client gets no reset, no close and no
   * answer, as when the primary's host vanishes in a failover; the server's end is closed (its
   * sessions end, as the vanished host's did).
   * New connections forward as before (to the new primary). Returns how many it stalled.
   */
  stall(): number;
  /** True while an outage is under way. */
  readonly down: boolean;
  /** Connections currently forwarded. */
  readonly open: number;
  stop(): Promise<void>;
}

export async function startDbProxy(target: { host: string; port: number }): Promise<DbProxy> {
  const pairs = new Set<{ client: net.Socket; upstream: net.Socket }>();
  const stalled = new Set<{ client: net.Socket; upstream: net.Socket }>();
  let downUntil = 0;
  let overTimer: NodeJS.Timeout | null = null;
  let overResolve: (() => void) | null = null;

  const reset = (s: net.Socket) => {
    // resetAndDestroy sends RST where the socket is connected; a socket still connecting is destroyed.
    if (s.destroyed) return;
    if (s.readyState === 'open') s.resetAndDestroy();
    else s.destroy();
  };

  const server = net.createServer((client) => {
    client.on('error', () => undefined);
    if (Date.now() < downUntil) {
      reset(client);
      return;
    }
    const upstream = net.connect(target.port, target.host);
    upstream.on('error', () => undefined);
    const pair = { client, upstream };
    pairs.add(pair);
    const close = () => {
      if (stalled.has(pair)) return; // its server end is gone on purpose; the client hears nothing
      pairs.delete(pair);
      reset(client);
      reset(upstream);
    };
    client.once('close', close);
    upstream.once('close', close);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as net.AddressInfo).port;

  return {
    port,
    url(databaseUrl: string) {
      const u = new URL(databaseUrl);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    failover(seconds: number) {
      const endsAt = Date.now() + seconds * 1000;
      downUntil = Math.max(downUntil, endsAt);
      const n = pairs.size;
      for (const p of [...pairs]) {
        pairs.delete(p);
        reset(p.client);
        reset(p.upstream);
      }
      if (overTimer) clearTimeout(overTimer);
      const over = new Promise<void>((resolve) => {
        const previous = overResolve;
        overResolve = () => {
          previous?.();
          resolve();
        };
        overTimer = setTimeout(
          () => {
            overTimer = null;
            const r = overResolve;
            overResolve = null;
            r?.();
          },
          Math.max(0, downUntil - Date.now()),
        );
      });
      return { endsAt: downUntil, reset: n, over };
    },
    stall() {
      const n = pairs.size;
      for (const p of [...pairs]) {
        pairs.delete(p);
        stalled.add(p);
        p.client.unpipe(p.upstream);
        p.upstream.unpipe(p.client);
        // The client's requests wait in the kernel's buffers, unanswered; the server end is closed
        // (as a host that went away: its sessions, their transactions and their locks are gone).
        p.client.pause();
        p.upstream.destroy();
      }
      return n;
    },
    get down() {
      return Date.now() < downUntil;
    },
    get open() {
      return pairs.size;
    },
    async stop() {
      if (overTimer) clearTimeout(overTimer);
      overResolve?.();
      for (const p of [...pairs, ...stalled]) {
        p.client.destroy();
        p.upstream.destroy();
      }
      pairs.clear();
      stalled.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
