// The API's end of the live event bus (events.ts): one dedicated connection LISTENs on the
// channel, keeps the most recent events in a ring buffer with a sequence number, and hands each
// new event to the subscribers (the page's streams). The connection is not from the API's pool:
// a LISTEN holds its session for good, and the pool's connections serve requests.
//
// When the connection drops (failover, pg_terminate_backend, restart) the feed reconnects with
// a capped backoff and says so (`connected`); events sent while it was away are not replayed:
// the feed is a view, the job table stays the record.

import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { DatabaseCredentialSource } from '../db/credentials.ts';
import { createClient, credentialsTried } from '../db/pool.ts';
import { isAuthenticationFailure } from '../db/unavailable.ts';
import type { Logger } from '../observability/log.ts';
import { LIVE_CHANNEL, type LiveEvent } from './events.ts';

export interface FeedEvent extends LiveEvent {
  seq: number;
}

export type FeedListener = (events: FeedEvent[]) => void;

export interface LiveFeedOptions {
  /** Connection string for the LISTEN session. */
  url: string;
  channel?: string;
  /** Events kept for a page that connects later. */
  capacity?: number;
  log?: Logger;
  applicationName?: string;
  /** The services' credentials as last read (db/credentials.ts): the session logs in with them, not the URL's. */
  credentials?: DatabaseCredentialSource;
}

export class LiveFeed {
  private ring: FeedEvent[] = [];
  private seq = 0;
  private readonly listeners = new Set<FeedListener>();
  private client: pg.Client | null = null;
  private stopped = false;
  private retryTimer: NodeJS.Timeout | null = null;
  private failures = 0;
  private readonly capacity: number;
  private readonly channel: string;
  connected = false;
  /** Names this feed's sequence: a page that saw another one (before an API restart) starts over. */
  readonly epoch = randomBytes(4).toString('hex');
  /** Workers as last seen on the bus: id → last event time (ms), pid, jobs held, gone (worker-down). */
  readonly workers = new Map<string, { lastSeen: number; pid?: number; running?: number; down: boolean }>();

  constructor(private readonly opts: LiveFeedOptions) {
    this.capacity = opts.capacity ?? 500;
    this.channel = opts.channel ?? LIVE_CHANNEL;
  }

  async start(): Promise<void> {
    this.stopped = false;
    await this.connect().catch(() => this.scheduleReconnect());
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    const c = this.client;
    this.client = null;
    this.connected = false;
    await c?.end().catch(() => undefined);
    this.listeners.clear();
  }

  /** Events after `seq` (all kept ones for 0), oldest first. */
  since(seq = 0, limit = this.capacity): FeedEvent[] {
    const out = this.ring.filter((e) => e.seq > seq);
    return out.slice(-limit);
  }

  get lastSeq(): number {
    return this.seq;
  }

  subscribe(fn: FeedListener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Add events from this process (or tests) as if they came over the bus. */
  publish(events: LiveEvent[]): void {
    if (events.length === 0) return;
    const now = Date.now();
    const added: FeedEvent[] = [];
    for (const e of events) {
      if (!e || typeof e !== 'object' || typeof e.kind !== 'string' || typeof e.workerId !== 'string') continue;
      // Faults and cancels come from the injector, the API or the CLI, a scheduled job from any
      // task (the API's too): no worker to track.
      if (e.kind !== 'fault' && e.kind !== 'cancelled' && e.kind !== 'scheduled') {
        const w = this.workers.get(e.workerId) ?? { lastSeen: now, down: false };
        w.lastSeen = now;
        w.down = e.kind === 'worker-down';
        if (e.pid !== undefined) w.pid = e.pid;
        if (e.running !== undefined) w.running = e.running;
        this.workers.set(e.workerId, w);
      }
      // Presence pings keep the worker list fresh; they are not news for the feed.
      if (e.kind === 'worker-alive') continue;
      added.push({ ...e, seq: ++this.seq });
    }
    if (added.length === 0) return;
    this.ring.push(...added);
    if (this.ring.length > this.capacity) this.ring.splice(0, this.ring.length - this.capacity);
    for (const fn of this.listeners) {
      try {
        fn(added);
      } catch {
        /* one broken stream does not stop the others */
      }
    }
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    const credentials = this.opts.credentials;
    const c = createClient(
      { connectionString: this.opts.url, application_name: this.opts.applicationName ?? 'jobs-api live feed' },
      credentials,
    );
    c.on('error', (err) => {
      this.opts.log?.warn({ err }, 'live feed: LISTEN connection lost; reconnecting');
      this.dropped(c);
    });
    c.on('end', () => this.dropped(c));
    c.on('notification', (n) => {
      if (n.channel !== this.channel || !n.payload) return;
      try {
        const parsed = JSON.parse(n.payload) as unknown;
        this.publish((Array.isArray(parsed) ? parsed : [parsed]) as LiveEvent[]);
      } catch {
        this.opts.log?.debug({ payload: n.payload.slice(0, 200) }, 'live feed: ignoring a payload that is not JSON');
      }
    });
    try {
      await c.connect();
      await c.query(`LISTEN ${pg.escapeIdentifier(this.channel)}`);
    } catch (err) {
      await c.end().catch(() => undefined);
      // A password rotated since: read the secret, so the next attempt logs in with the new one.
      const tried = credentialsTried(err);
      if (credentials && tried && isAuthenticationFailure(err)) await credentials.renewedSince(tried);
      throw err;
    }
    if (this.stopped) {
      await c.end().catch(() => undefined);
      return;
    }
    this.client = c;
    this.connected = true;
    this.failures = 0;
  }

  private dropped(c: pg.Client): void {
    if (this.client !== c) return;
    this.client = null;
    this.connected = false;
    void c.end().catch(() => undefined);
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.stopped || this.retryTimer) return;
    this.failures++;
    const ms = Math.min(10_000, 250 * 2 ** Math.min(this.failures, 6));
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.connect().catch((err: unknown) => {
        this.opts.log?.warn({ err, retryInMs: ms }, 'live feed: could not LISTEN; retrying');
        this.scheduleReconnect();
      });
    }, ms);
    this.retryTimer.unref();
  }
}
