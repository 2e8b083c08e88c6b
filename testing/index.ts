// erp-jobs/testing: the kit for testing job handlers (README "Testing your handler").
//
//   const kit = await createTestKit({ jobs: [postInvoices] });
//   const job = await kit.enqueue('invoices.post', { batch: 'B-1' });
//   expect(await kit.runOnce(job)).toMatchObject({ state: 'succeeded' });
//   await kit.close();
//
// Not part of what the services run: nothing in runtime/ imports it.
export { createTestKit, TestKit, type AttemptEnd, type Mark, type PausedAttempt, type Point, type TestKitOptions } from './kit.ts';
export { TestWorker } from './worker.ts';
export { LeaseLostError, NonRetryableError } from '../runtime/domain/errors.ts';
export type { Job, AttemptOutcome } from '../runtime/domain/job.ts';
