// The shapes of the two values every layer takes from people and messages: a job id and a time.
// Written once so the API, the on-call routes, the CLI, the queue message parser and the local
// stack accept exactly the same strings. Job ids are generated as UUID v7 (uuid7.ts), but any
// UUID in the canonical 8-4-4-4-12 form is a well-formed id: the check is the shape, not the version.

/** A UUID's canonical text, unanchored: for finding an id inside a longer string. */
export const JOB_ID_SHAPE = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';

/** A job id: a UUID, either case (ids are stored and answered lower-case). */
export const JOB_ID_PATTERN = new RegExp(`^${JOB_ID_SHAPE}$`, 'i');

export function isJobId(s: string): boolean {
  return JOB_ID_PATTERN.test(s);
}

/**
 * ISO 8601 date, or date-time with an explicit offset: a time without one would be read in the
 * reader's zone, so the same string would name different instants on different machines.
 */
export const ISO_TIME_PATTERN = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2}))?$/i;

/**
 * The instant an ISO 8601 time (ISO_TIME_PATTERN) names, or null when the string has not that
 * shape or names no real instant (month 13, hour 25). The shape is checked first because Date parses far
 * more than ISO 8601 (new Date('1') is a date).
 */
export function parseIsoTime(s: unknown): Date | null {
  if (typeof s !== 'string' || !ISO_TIME_PATTERN.test(s)) return null;
  const d = new Date(s);
  return Number.isNaN(d.getTime()) ? null : d;
}
