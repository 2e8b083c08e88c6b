// The on-call routes' input (oncall-routes.ts): each body and query as a schema, checked before a
// service runs, and the dead-job filter they share.

import * as z from 'zod';
import type { Lane } from '../domain/lanes.ts';
import type { DeadJobFilter } from '../oncall/dead-jobs.ts';
import { by, flag, flagParam, isoTime, jobId, laneFilter, listLimit, optional, text, wholeNumber, wholeNumberParam } from './kernel.ts';

const reason = optional(text(1000));
const idsError = 'must be an array of job ids (UUIDs)';
const jobIds = optional(z.array(jobId(idsError), { error: idsError }));
/** One lane's dead jobs; absent or null: every lane's (as the DLQ routes' lane). */
const lane = () => laneFilter("one lane's dead jobs; default every lane's");
const filter = {
  ids: jobIds,
  type: optional(text(100)),
  lane: lane(),
  since: optional(isoTime()),
  until: optional(isoTime()),
  all: optional(flag()),
};
export const id = { id: jobId() };

export const DeadJobsQuery = z.object({
  type: optional(text(100)),
  lane: lane(),
  since: optional(isoTime()),
  until: optional(isoTime()),
  includeDiscarded: optional(flagParam()),
  limit: listLimit(200, 50),
  cursor: z.string().optional(),
});
export const RedriveMany = z.strictObject({
  ...filter,
  by: by(100),
  reason,
  maxAttempts: optional(wholeNumber(1, 100)),
  fromScratch: optional(flag()),
  dryRun: optional(flag()),
});
export const DiscardMany = z.strictObject({ ...filter, by: by(100), reason: text(1000), dryRun: optional(flag()) });
export const RedriveOne = z.strictObject({
  by: by(100),
  reason,
  maxAttempts: optional(wholeNumber(1, 100)),
  fromScratch: optional(flag()),
});
export const DiscardOne = z.strictObject({ by: by(100), reason: text(1000) });
export const PoisonQuery = z.object({
  reason: z.enum(['unparseable-body', 'unknown-job'], { error: 'must be unparseable-body or unknown-job' }).optional(),
  since: optional(isoTime()),
  includeResolved: optional(flagParam()),
  limit: listLimit(200, 50),
  cursor: z
    .string()
    .regex(/^\d{1,18}$/, { error: 'is not a cursor this listing returned' })
    .optional(),
});
// Other limits than the alarm's, as `jobs stuck --running-seconds/--pending-seconds` (a drill, a closer look).
const stuckLimit = () => optional(wholeNumberParam(1, 7 * 86_400)).meta({ description: "seconds; default the alarm's" });
export const StuckQuery = z.object({ limit: listLimit(1000, 100), runningSeconds: stuckLimit(), pendingSeconds: stuckLimit() });
export const Republish = z.strictObject({
  ids: jobIds,
  type: optional(text(100)),
  olderThanSeconds: optional(wholeNumber(0, 365 * 86_400)),
  by: by(200),
  reason,
  limit: optional(wholeNumber(1, 100_000)),
});

export function filterFrom(b: {
  ids?: string[] | undefined;
  type?: string | undefined;
  lane?: Lane | undefined;
  since?: Date | undefined;
  until?: Date | undefined;
  all?: boolean | undefined;
}): DeadJobFilter & { all: boolean } {
  return {
    ...(b.ids ? { ids: b.ids } : {}),
    ...(b.type ? { type: b.type } : {}),
    ...(b.lane ? { lane: b.lane } : {}),
    ...(b.since ? { since: b.since } : {}),
    ...(b.until ? { until: b.until } : {}),
    all: b.all ?? false,
  };
}
