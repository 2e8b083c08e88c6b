// The job types this deployment knows. ERP developers add theirs here.
import { inventoryCost } from './inventory-cost.ts';
import { ledgerPost } from './ledger-post.ts';
import { JobRegistry } from './registry.ts';

/** Every registered job definition. Kept as a tuple so that a typed enqueue (createJobClient) knows each type's name and payload. */
export const JOB_DEFINITIONS = [ledgerPost, inventoryCost] as const;

/** One of the registered job definitions, as a type: what `createJobClient().enqueue` accepts is built from it. */
export type RegisteredJob = (typeof JOB_DEFINITIONS)[number];

export function defaultRegistry(): JobRegistry {
  return new JobRegistry([...JOB_DEFINITIONS]);
}
