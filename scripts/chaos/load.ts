// The chaos run's mixed load, enqueued through the API process over HTTP like an ERP would:
// ledger.post batches that succeed, that fail a few attempts first, that fail past their cap;
// inventory.cost runs long enough to checkpoint and be interrupted; and bursts of concurrent
// enqueues sharing one idempotency key; and groups of jobs sharing a concurrency key (postings
// per company, limit 1; costing per store, limit 2). Each job's plan says how it must end.

import type { KeyBurst, PlannedJob } from './verify.ts';

export type Random = () => number;

/** A small seeded PRNG (mulberry32): a run can be repeated with --seed. */
export function seeded(seed: number): Random {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const between = (r: Random, lo: number, hi: number) => lo + Math.floor(r() * (hi - lo + 1));

export interface JobSpec {
  type: string;
  payload: Record<string, unknown>;
  maxAttempts: number;
  idempotencyKey?: string;
  concurrencyKey?: string;
  concurrencyLimit?: number;
  expect: 'succeeded' | 'dead';
}

export type LoadKind = 'ledger-ok' | 'ledger-flaky' | 'ledger-dead' | 'inventory' | 'key-burst' | 'ledger-keyed' | 'inventory-keyed';

/** The mix: mostly work that must succeed, some that must die, a few idempotency bursts, keyed groups. */
export function pickKind(r: Random): LoadKind {
  const x = r();
  if (x < 0.36) return 'ledger-ok';
  if (x < 0.48) return 'ledger-flaky';
  if (x < 0.58) return 'ledger-dead';
  if (x < 0.78) return 'inventory';
  if (x < 0.86) return 'key-burst';
  if (x < 0.94) return 'ledger-keyed';
  return 'inventory-keyed';
}

/**
 * Jobs a kind enqueues at once: a keyed group is three jobs of one key, so they contend for it
 * (blocked, then woken one after the other) rather than arriving one by one to a free key.
 */
export const groupSize = (kind: LoadKind): number => (kind === 'ledger-keyed' || kind === 'inventory-keyed' ? 3 : 1);

/** One job of a kind (`part` of its group). `maxAttempts` leaves room above the planned failures for the faults. */
export function specFor(kind: LoadKind, n: number, r: Random, attemptCap: number, part = 0): JobSpec {
  switch (kind) {
    case 'ledger-ok':
      return {
        type: 'ledger.post',
        payload: { batch: `CH-${n}`, entries: between(r, 5, 40), workMs: between(r, 300, 2500) },
        maxAttempts: attemptCap,
        expect: 'succeeded',
      };
    case 'ledger-flaky':
      return {
        type: 'ledger.post',
        payload: { batch: `CH-${n}`, entries: between(r, 3, 20), workMs: between(r, 200, 1200), failAttempts: between(r, 1, 2) },
        maxAttempts: attemptCap,
        expect: 'succeeded',
      };
    case 'ledger-dead':
      return {
        type: 'ledger.post',
        payload: { batch: `CH-${n}`, entries: between(r, 3, 10), workMs: between(r, 100, 500), failAttempts: 99 },
        maxAttempts: 2,
        expect: 'dead',
      };
    case 'inventory':
      return {
        type: 'inventory.cost',
        payload: {
          store: `S-${n}`,
          period: '2026-10',
          skus: between(r, 20, 80),
          movementsPerSku: 40,
          chunkSize: 10,
          workMsPerChunk: between(r, 200, 500),
        },
        maxAttempts: attemptCap,
        expect: 'succeeded',
      };
    case 'key-burst':
      return {
        type: 'ledger.post',
        payload: { batch: `KEY-${n}`, entries: 9, workMs: between(r, 1500, 2500) },
        maxAttempts: attemptCap,
        idempotencyKey: `chaos-key-${n}`,
        expect: 'succeeded',
      };
    case 'ledger-keyed':
      // Three companies, one posting at a time each; some fail an attempt first (the key is
      // handed on at the failure and taken back for the retry in its turn).
      return {
        type: 'ledger.post',
        payload: {
          batch: `CK-${n}-${part}`,
          entries: between(r, 3, 20),
          workMs: between(r, 100, 600),
          ...(r() < 0.25 ? { failAttempts: 1 } : {}),
        },
        maxAttempts: attemptCap,
        concurrencyKey: `ledger:company-${(n % 3) + 1}`,
        concurrencyLimit: 1,
        expect: 'succeeded',
      };
    case 'inventory-keyed':
      // Two stores, two costing runs at a time each.
      return {
        type: 'inventory.cost',
        payload: {
          store: `SK-${n}-${part}`,
          period: '2026-10',
          skus: between(r, 20, 40),
          movementsPerSku: 40,
          chunkSize: 10,
          workMsPerChunk: between(r, 150, 300),
        },
        maxAttempts: attemptCap,
        concurrencyKey: `costing:store-${(n % 2) + 1}`,
        concurrencyLimit: 2,
        expect: 'succeeded',
      };
  }
}

export interface Enqueued {
  planned: PlannedJob[];
  burst?: KeyBurst;
  errors: number;
}

/** POST /v1/jobs once, or `copies` times at once for an idempotency burst. */
export async function enqueueViaApi(apiUrl: string, spec: JobSpec, copies = 1): Promise<Enqueued> {
  const body = JSON.stringify({
    type: spec.type,
    payload: spec.payload,
    maxAttempts: spec.maxAttempts,
    ...(spec.idempotencyKey ? { idempotencyKey: spec.idempotencyKey } : {}),
    ...(spec.concurrencyKey ? { concurrencyKey: spec.concurrencyKey, concurrencyLimit: spec.concurrencyLimit } : {}),
  });
  const results = await Promise.all(
    Array.from({ length: copies }, async () => {
      try {
        const res = await fetch(`${apiUrl}/v1/jobs`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
          signal: AbortSignal.timeout(15_000),
        });
        if (res.status !== 201 && res.status !== 200) return null;
        return ((await res.json()) as { id: string }).id;
      } catch {
        return null;
      }
    }),
  );
  const ids = results.filter((x): x is string => x !== null);
  const errors = results.length - ids.length;
  const planned = [...new Set(ids)].map((id) => ({
    id,
    type: spec.type,
    expect: spec.expect,
    via: 'api' as const,
    ...(spec.idempotencyKey ? { idempotencyKey: spec.idempotencyKey } : {}),
  }));
  return {
    planned,
    errors,
    ...(spec.idempotencyKey && copies > 1 ? { burst: { key: spec.idempotencyKey, type: spec.type, returnedIds: ids } } : {}),
  };
}
