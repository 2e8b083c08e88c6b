// inventory.cost: a weighted-average costing run for one store and period over its stock
// movements (generated deterministically here, standing in for the ERP's movement table).
// It shows the long-job half of the contract: it saves a checkpoint after each chunk of SKUs,
// so an attempt that reclaims the job after a crash resumes where the last one stopped, and it
// writes its cost rows with the completion, so a run that lost its lease writes nothing.
import { createHash } from 'node:crypto';
import * as z from 'zod';
import { defineJob, type JobContext } from './types.ts';
import { pause, text, wholeNumber } from './validate.ts';

const payload = z.strictObject({
  store: text({ max: 50 }).describe('the store to cost'),
  period: text({ pattern: /^\d{4}-(0[1-9]|1[0-2])$/, hint: 'YYYY-MM' }).describe('the month to cost'),
  skus: wholeNumber(1, 100_000, 200).describe('how many SKUs the store has'),
  movementsPerSku: wholeNumber(1, 10_000, 200).describe('stock movements per SKU in the period'),
  chunkSize: wholeNumber(1, 10_000, 25).describe('SKUs costed between checkpoints'),
  workMsPerChunk: wholeNumber(0, 600_000, 0).describe('simulated work per chunk, in ms'),
});

export type InventoryCostPayload = z.output<typeof payload>;

export interface SkuCost {
  sku: string;
  quantity: number;
  unitCost: number;
  totalCost: number;
}

interface Checkpoint {
  nextSku: number;
  costs: SkuCost[];
}

export interface InventoryCostResult {
  store: string;
  period: string;
  skus: number;
  totalValue: number;
  /** The SKU index this attempt started from: above 0 when it resumed from a checkpoint. */
  resumedFrom: number;
}

/** Deterministic PRNG (mulberry32) seeded from a string. */
function rng(seed: string): () => number {
  let a = createHash('sha256').update(seed).digest().readUInt32LE(0);
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Weighted-average cost of one SKU over its movements: receipts move the average, issues do not. */
export function costSku(store: string, period: string, skuIndex: number, movements: number): SkuCost {
  const sku = `SKU-${String(skuIndex + 1).padStart(5, '0')}`;
  const rand = rng(`${store}|${period}|${sku}`);
  let qty = 0;
  let avg = 0;
  for (let i = 0; i < movements; i++) {
    if (qty === 0 || rand() < 0.55) {
      const q = 1 + Math.floor(rand() * 50);
      const cost = Math.round((5 + rand() * 95) * 100) / 100;
      avg = (qty * avg + q * cost) / (qty + q);
      qty += q;
    } else {
      qty -= Math.min(qty, 1 + Math.floor(rand() * 30));
    }
  }
  const unitCost = Math.round(avg * 1e6) / 1e6;
  return { sku, quantity: qty, unitCost, totalCost: Math.round(qty * unitCost * 100) / 100 };
}

export const inventoryCost = defineJob({
  type: 'inventory.cost',
  description: 'Weighted-average inventory costing for a store and period',
  expectedMaxSeconds: 3600,
  schema: payload,
  // One costing of a store at a time (two would read each other's half-written period), and at
  // most four across the fleet (each loads the database for minutes), whatever the autoscaling.
  concurrency: { key: 'costing:{store}' },
  maxRunning: 4,
  async run(p, ctx: JobContext<Checkpoint>): Promise<InventoryCostResult> {
    const resumedFrom = ctx.checkpoint?.nextSku ?? 0;
    const costs = [...(ctx.checkpoint?.costs ?? [])];
    if (resumedFrom > 0) ctx.log.info({ resumedFrom }, 'resuming from checkpoint');
    for (let start = resumedFrom; start < p.skus; start += p.chunkSize) {
      if (ctx.signal.aborted) throw ctx.signal.reason;
      const end = Math.min(p.skus, start + p.chunkSize);
      for (let i = start; i < end; i++) costs.push(costSku(p.store, p.period, i, p.movementsPerSku));
      if (p.workMsPerChunk > 0) await pause(p.workMsPerChunk, ctx.signal);
      await ctx.saveCheckpoint({ nextSku: end, costs }, { fraction: end / p.skus, message: `costed ${end}/${p.skus} SKUs` });
    }
    // Effects: one statement, in the job's transaction, committed with the completion.
    await ctx.db.query(
      `INSERT INTO inventory_costs (job_id, store, period, sku, quantity, unit_cost, total_cost)
       SELECT $1, $2, $3, c.sku, c.quantity, c.unit_cost, c.total_cost
         FROM jsonb_to_recordset($4::jsonb) AS c(sku text, quantity numeric, unit_cost numeric, total_cost numeric)`,
      [
        ctx.job.id,
        p.store,
        p.period,
        JSON.stringify(costs.map((c) => ({ sku: c.sku, quantity: c.quantity, unit_cost: c.unitCost, total_cost: c.totalCost }))),
      ],
    );
    const totalValue = Math.round(costs.reduce((s, c) => s + c.totalCost, 0) * 100) / 100;
    return { store: p.store, period: p.period, skus: costs.length, totalValue, resumedFrom };
  },
});
