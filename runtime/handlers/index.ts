// The job types this deployment knows. ERP developers add theirs here.
import { inventoryCost } from './inventory-cost.ts';
import { ledgerPost } from './ledger-post.ts';
import { JobRegistry } from './registry.ts';

export function defaultRegistry(): JobRegistry {
  return new JobRegistry([ledgerPost, inventoryCost]);
}
