// A lean SQS client for the hot path: ReceiveMessage, DeleteMessageBatch,
// ChangeMessageVisibilityBatch and SendMessageBatch as AWS JSON 1.0 POSTs, SigV4-signed with
// node:crypto (sqs-sign.ts), over keep-alive connections of the platform's own HTTP/1.1 client
// (http1.ts; node:http's agent with JOBS_SQS_HTTP_CLIENT=node). Why: per call the SDK's middleware stack,
// schema serde, endpoint resolution and signer cost several times the CPU of the request itself
// (a DeleteMessageBatch of 10 against the local endpoint: ~1.3 ms of CPU through the SDK, ~0.36
// ms sent plainly), and every job pays for about 0.2 such calls. SqsQueue (sqs.ts) says when it
// is used; everything else (GetQueueAttributes, the DLQ tools, the CLI) stays on the SDK.
//
// It keeps what the SDK (@aws-sdk/client-sqs 3.x, standard retry mode) gave the hot path:
//  - credentials, region and the attempt cap from the SQSClient's own resolution
//    (client.config.credentials(), memoized, refreshes the task role's credentials before they
//    expire; client.config.region(); client.config.maxAttempts(): JOBS_SQS_MAX_ATTEMPTS);
//  - the endpoint: the client's explicit one (JOBS_SQS_ENDPOINT), else the queue URL's origin, as
//    the SDK's useQueueUrlAsEndpoint does;
//  - retries as @smithy/core/retry's StandardRetryStrategy: throttling (its code list, or 429),
//    transient errors (timeouts, 500/502/503/504, ECONNRESET, ECONNREFUSED, EPIPE, ETIMEDOUT and
//    the DNS/route codes) and a corrected clock skew, up to maxAttempts, with full-jitter
//    exponential backoff (base 50 ms, throttling 1 s, cap 20 s, Retry-After honoured) and the same
//    retry quota (500 tokens, a retry costs 14, a throttled one 5); never after the caller's
//    AbortSignal fired; never on another 4xx;
//  - errors named as the SDK names them for SQS (sqs-wire-errors.ts: e.g. the Query-API code
//    AWS.SimpleQueueService.NonExistentQueue is QueueDoesNotExist), with message, $fault and
//    $metadata.httpStatusCode;
//  - the clock-skew correction of the SDK's signer (the offset sampled from each response's Date);
//  - the MD5 checks of @aws-sdk/middleware-sdk-sqs: a received body, or a sent one as SQS
//    acknowledges it, whose MD5 differs throws.
// And adds what the SDK left unbounded: a deadline per request (a receive at its wait + 15 s,
// anything else at 30 s), so a socket that stops answering (a NAT or ENI change) is abandoned and
// retried instead of hanging the worker.

import { hash } from 'node:crypto';
import http, { type IncomingHttpHeaders } from 'node:http';
import https from 'node:https';
import type {
  ChangeMessageVisibilityBatchRequest,
  ChangeMessageVisibilityBatchResult,
  DeleteMessageBatchRequest,
  DeleteMessageBatchResult,
  ReceiveMessageRequest,
  ReceiveMessageResult,
  SendMessageBatchRequest,
  SendMessageBatchResult,
  SQSClient,
} from '@aws-sdk/client-sqs';
import type { SqsHttpClient } from '../config/sqs.ts';
import { ConnectionClosed, Http1Client } from './http1.ts';
import { type SigningKeyCache, type SqsCredentials, sha256Hex, signSqsRequest } from './sqs-sign.ts';
import {
  CLOCK_SKEW_MS,
  type Failure,
  MAX_RETRY_DELAY_MS,
  RETRY_COST,
  RETRY_QUOTA,
  retryKind,
  serviceError,
  type WireResponse,
} from './sqs-wire-errors.ts';

export { SqsServiceError, type SqsMetadata, sqsErrorName } from './sqs-wire-errors.ts';

/** The four operations SqsQueue sends on the hot path: over the wire, or through the SDK (sqs.ts). */
export interface SqsHotPath {
  receiveMessage(input: ReceiveMessageRequest, signal?: AbortSignal): Promise<ReceiveMessageResult>;
  deleteMessageBatch(input: DeleteMessageBatchRequest, signal?: AbortSignal): Promise<DeleteMessageBatchResult>;
  changeMessageVisibilityBatch(
    input: ChangeMessageVisibilityBatchRequest,
    signal?: AbortSignal,
  ): Promise<ChangeMessageVisibilityBatchResult>;
  sendMessageBatch(input: SendMessageBatchRequest, signal?: AbortSignal): Promise<SendMessageBatchResult>;
}

export interface SqsWireTimings {
  /** Longest a request other than a receive may take, retried after (default 30 s). */
  requestTimeoutMs?: number;
  /** A receive's deadline beyond its long-poll wait (default 15 s). */
  receiveGraceMs?: number;
  /** The backoff bases (default 50 ms and 1 s for throttling, the SDK's); tests shorten them. */
  retryDelayMs?: { base: number; throttling: number };
  /**
   * Which HTTP client sends: the platform's own (http1.ts, the default: half the CPU a call) or
   * node:http (JOBS_SQS_HTTP_CLIENT=node, should the platform's ever misread a server).
   */
  httpClient?: SqsHttpClient;
}

export interface SqsWireOptions extends SqsWireTimings {
  credentials: () => Promise<SqsCredentials>;
  region: () => Promise<string>;
  maxAttempts: () => Promise<number>;
  /** A local endpoint; absent (or resolving to undefined), each request goes to its queue URL's origin. */
  endpoint?: () => Promise<URL | undefined>;
}

export class SqsWire implements SqsHotPath {
  private readonly httpAgent = new http.Agent({ keepAlive: true, maxSockets: 50 });
  private readonly httpsAgent = new https.Agent({ keepAlive: true, maxSockets: 50 });
  /** What sends: the platform's HTTP/1.1 client or node:http (JOBS_SQS_HTTP_CLIENT). */
  readonly httpClient: SqsHttpClient;
  /** The platform's own HTTP/1.1 client (http1.ts); null when node:http sends. */
  private readonly http1: Http1Client | null;
  private readonly keys: SigningKeyCache = {};
  private readonly origins = new Map<string, URL>();
  private settings: Promise<{ region: string; maxAttempts: number; endpoint: URL | undefined }> | undefined;
  private quota = RETRY_QUOTA;
  /** Server time minus local time, learned from responses' Date headers (the SDK's systemClockOffset). */
  private clockOffsetMs = 0;
  private readonly requestTimeoutMs: number;
  private readonly receiveGraceMs: number;
  private readonly retryDelayMs: { base: number; throttling: number };

  constructor(private readonly o: SqsWireOptions) {
    this.requestTimeoutMs = o.requestTimeoutMs ?? 30_000;
    this.receiveGraceMs = o.receiveGraceMs ?? 15_000;
    this.retryDelayMs = o.retryDelayMs ?? { base: 50, throttling: 1000 };
    this.httpClient = o.httpClient ?? 'platform';
    // Connections per origin: a worker's receives ahead (up to 64 capacities or 1,280 messages / 10 in flight at
    // once, fetcher.ts) and its deletes, each a round trip of 10–20 ms. With 50 (the SDK's
    // default), calls queued for a connection at 10,000 jobs/s: no-op jobs at concurrency 50 with
    // 15 ms per call kept 73–75 % of the zero-delay rate, against 97–104 % with 256
    // (docs/performance-history.md, session 25).
    this.http1 = this.httpClient === 'platform' ? new Http1Client({ maxSockets: 256 }) : null;
  }

  /** The wire for what `client` is configured with: its credentials, region, attempt cap and endpoint. */
  static forClient(client: SQSClient, timings: SqsWireTimings = {}): SqsWire {
    const c = client.config;
    return new SqsWire({
      ...timings,
      credentials: () => c.credentials(),
      region: () => c.region(),
      maxAttempts: () => c.maxAttempts(),
      endpoint: async () => {
        if (!c.isCustomEndpoint || !c.endpoint) return undefined;
        const e = await c.endpoint();
        return new URL(`${e.protocol}//${e.hostname}${e.port ? `:${e.port}` : ''}`);
      },
    });
  }

  async receiveMessage(input: ReceiveMessageRequest, signal?: AbortSignal): Promise<ReceiveMessageResult> {
    const waitMs = (input.WaitTimeSeconds ?? 20) * 1000;
    const out = await this.call<ReceiveMessageResult>('ReceiveMessage', input, waitMs + this.receiveGraceMs, signal);
    const bad: string[] = [];
    for (const m of out.Messages ?? []) {
      if (md5Hex(m.Body ?? '') !== m.MD5OfBody) bad.push(m.MessageId ?? '?');
      // Binary attribute values travel as base64; the SDK's type says bytes.
      const attributes = m.MessageAttributes;
      if (attributes)
        for (const k in attributes) {
          const v = attributes[k]!;
          if (typeof v.BinaryValue === 'string') v.BinaryValue = Buffer.from(v.BinaryValue, 'base64');
        }
    }
    if (bad.length > 0) throw new Error(`Invalid MD5 checksum on messages: ${bad.join(', ')}`);
    return out;
  }

  deleteMessageBatch(input: DeleteMessageBatchRequest, signal?: AbortSignal): Promise<DeleteMessageBatchResult> {
    return this.call('DeleteMessageBatch', input, this.requestTimeoutMs, signal);
  }

  changeMessageVisibilityBatch(
    input: ChangeMessageVisibilityBatchRequest,
    signal?: AbortSignal,
  ): Promise<ChangeMessageVisibilityBatchResult> {
    return this.call('ChangeMessageVisibilityBatch', input, this.requestTimeoutMs, signal);
  }

  async sendMessageBatch(input: SendMessageBatchRequest, signal?: AbortSignal): Promise<SendMessageBatchResult> {
    for (const e of input.Entries ?? []) {
      for (const v of Object.values(e.MessageAttributes ?? {})) {
        if (v.BinaryValue !== undefined || v.BinaryListValues !== undefined) {
          throw new TypeError('SqsWire.sendMessageBatch sends string and number attributes only (a binary value needs base64 encoding)');
        }
      }
    }
    const out = await this.call<SendMessageBatchResult>('SendMessageBatch', input, this.requestTimeoutMs, signal);
    const sent = new Map((input.Entries ?? []).map((e) => [e.Id, e.MessageBody ?? '']));
    const bad = (out.Successful ?? []).filter((s) => sent.has(s.Id) && md5Hex(sent.get(s.Id)!) !== s.MD5OfMessageBody);
    if (bad.length > 0) throw new Error(`Invalid MD5 checksum on messages: ${bad.map((s) => s.MessageId).join(', ')}`);
    return out;
  }

  /** Close the idle keep-alive connections (they do not keep the process alive either way). */
  destroy(): void {
    this.http1?.destroy();
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }

  private resolved(): Promise<{ region: string; maxAttempts: number; endpoint: URL | undefined }> {
    if (!this.settings) {
      const o = this.o;
      this.settings = (async () => ({ region: await o.region(), maxAttempts: await o.maxAttempts(), endpoint: await o.endpoint?.() }))();
      this.settings.catch(() => {
        this.settings = undefined;
      });
    }
    return this.settings;
  }

  private origin(queueUrl: string | undefined): URL {
    if (!queueUrl) throw new TypeError('SqsWire: QueueUrl is required');
    let url = this.origins.get(queueUrl);
    if (!url) {
      url = new URL(new URL(queueUrl).origin);
      this.origins.set(queueUrl, url);
    }
    return url;
  }

  /** One operation, signed afresh and retried per the standard mode until it succeeds or may not retry. */
  private async call<T>(operation: string, input: { QueueUrl: string | undefined }, timeoutMs: number, signal?: AbortSignal): Promise<T> {
    if (signal?.aborted) throw abortError(signal);
    const s = await this.resolved();
    const url = s.endpoint ?? this.origin(input.QueueUrl);
    const body = JSON.stringify(input);
    const bodyHash = sha256Hex(body);
    let attempts = 0;
    let totalRetryDelay = 0;
    let lastCost: number | undefined;
    for (;;) {
      attempts++;
      let failure: Failure;
      const offsetBefore = this.clockOffsetMs;
      try {
        const credentials = await this.o.credentials();
        const date = new Date(Date.now() + this.clockOffsetMs);
        const headers = signSqsRequest({ host: url.host, operation, body, bodyHash, region: s.region, credentials, date }, this.keys);
        headers['content-length'] = String(Buffer.byteLength(body));
        const sentAt = Date.now();
        const res = await this.post(url, operation, headers, body, timeoutMs, signal);
        this.sampleClock(res.headers, sentAt);
        if (res.status >= 200 && res.status < 300) {
          this.quota = Math.min(RETRY_QUOTA, this.quota + (lastCost ?? 1));
          return (res.text ? JSON.parse(res.text) : {}) as T;
        }
        failure = serviceError(res);
        if (Math.abs(this.clockOffsetMs) >= CLOCK_SKEW_MS && this.clockOffsetMs !== offsetBefore) {
          failure.$metadata = { ...failure.$metadata, clockSkewCorrected: true };
        }
      } catch (err) {
        failure = err instanceof Error ? (err as Failure) : new Error(String(err));
      }
      const kind = signal?.aborted ? null : retryKind(failure);
      const cost = kind ? RETRY_COST[kind] : 0;
      if (!kind || attempts >= s.maxAttempts || this.quota < cost) {
        failure.$metadata = { ...failure.$metadata, attempts, totalRetryDelay };
        throw failure;
      }
      this.quota -= cost;
      lastCost = cost;
      const delay = this.backoff(kind, attempts - 1, failure.retryAfter);
      totalRetryDelay += delay;
      await sleep(delay, signal);
    }
  }

  private backoff(kind: 'throttling' | 'transient', retries: number, retryAfter: string | undefined): number {
    const base = kind === 'throttling' ? this.retryDelayMs.throttling : this.retryDelayMs.base;
    const delay = Math.floor(Math.random() * Math.min(base * 2 ** retries, MAX_RETRY_DELAY_MS));
    if (!retryAfter) return delay;
    const at = /^\d+(\.\d+)?$/.test(retryAfter.trim()) ? Date.now() + Number(retryAfter) * 1000 : Date.parse(retryAfter);
    return Number.isNaN(at) ? delay : Math.max(delay, Math.min(at - Date.now(), delay + 5000));
  }

  private sampleClock(headers: IncomingHttpHeaders, sentAt: number): void {
    const date = headers.date;
    if (!date || headers.age !== undefined) return;
    const server = Date.parse(date);
    const now = Date.now();
    if (!Number.isNaN(server) && now - sentAt <= 900_000) this.clockOffsetMs = server - now;
  }

  private post(url: URL, operation: string, headers: Record<string, string>, body: string, timeoutMs: number, signal?: AbortSignal) {
    if (this.http1) {
      return this.http1
        .post(url, headers, body, {
          timeoutMs,
          signal,
          timeoutError: () => timeoutError(operation, url, timeoutMs),
          abortError: () => abortError(signal!),
        })
        .catch((err: unknown) => {
          // Worded as through node:http: the operation and the host.
          throw err instanceof ConnectionClosed ? connectionLost(operation, url) : err;
        });
    }
    return new Promise<WireResponse>((resolve, reject) => {
      let settled = false;
      let destroyedWith: Error | undefined;
      const finish = (err: Error | null, res?: WireResponse) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve(res!);
      };
      const secure = url.protocol === 'https:';
      const req = (secure ? https : http).request(
        {
          protocol: url.protocol,
          hostname: url.hostname,
          port: url.port || undefined,
          method: 'POST',
          path: '/',
          headers,
          agent: secure ? this.httpsAgent : this.httpAgent,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', (e) => finish(destroyedWith ?? e));
          res.on('end', () =>
            finish(null, { status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }),
          );
          res.on('close', () => {
            if (!res.complete) finish(destroyedWith ?? connectionLost(operation, url));
          });
        },
      );
      // Settles here too: a request already closed emits nothing more when destroyed.
      const stop = (err: Error) => {
        destroyedWith = err;
        req.destroy(err);
        finish(err);
      };
      const timer = setTimeout(() => stop(timeoutError(operation, url, timeoutMs)), timeoutMs);
      const onAbort = () => stop(abortError(signal!));
      signal?.addEventListener('abort', onAbort, { once: true });
      req.on('error', (e) => finish(destroyedWith ?? e));
      req.end(body);
    });
  }
}

function md5Hex(s: string): string {
  return hash('md5', s, 'hex');
}

function abortError(signal: AbortSignal): Error {
  return Object.assign(new Error('Request aborted'), { name: 'AbortError', cause: signal.reason });
}

function timeoutError(operation: string, url: URL, timeoutMs: number): Error {
  return Object.assign(new Error(`${operation} to ${url.host}: no answer within ${timeoutMs} ms`), {
    name: 'TimeoutError',
    code: 'ETIMEDOUT',
  });
}

function connectionLost(operation: string, url: URL): Error {
  return Object.assign(new Error(`${operation} to ${url.host}: the connection closed before the response was complete`), {
    code: 'ECONNRESET',
  });
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (ms <= 0) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const done = () => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    };
    const timer = setTimeout(done, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortError(signal!));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
