// The chaos run's concurrency-key check (issue 14): no key ever had more jobs running at once
// than its limit, under the faults.
//
// Two sources, both from the database:
//   recorded  each keyed job's last attempt, from its row: claimed_at (the claim's statement
//             time) to finished_at. The job row keeps only the last attempt's start (claimed_at
//             is overwritten by each claim; attempt_log keeps the ends of earlier attempts, not
//             their starts), so earlier attempts are not in this source. Exact where it applies:
//             both times are statements of the transactions that took and freed the key.
//   sampled   the running jobs per key, read by the harness every SAMPLE_MS while the load runs:
//             every attempt (failed, killed, reclaimed ones too), at the sampling instants.
// A violation in either fails the check.

import type { FinalJob } from './verify.ts';

/** How often the harness samples the running jobs per key. */
export const SAMPLE_MS = 100;

/** What the sampler saw: the most running at once per key, and each sample above a key's limit. */
export interface KeySamples {
  samples: number;
  most: Record<string, number>;
  over: { at: string; key: string; running: number; limit: number }[];
}

export interface KeyFigures {
  jobs: number;
  keys: number;
  /** Per key: its limit, its jobs, the most running at once in the recorded intervals and in the samples. */
  perKey: Record<string, { limit: number; jobs: number; recorded: number; sampled: number }>;
  /** Moments a key had more jobs running than its limit: in the recorded intervals, plus samples. */
  overlaps: number;
  samples: number;
}

/** The most intervals open at once, and the job ids open at each moment above `limit`. */
function sweep(intervals: { id: string; start: string; end: string }[], limit: number): { most: number; over: string[][] } {
  // Times are fixed-width UTC text with microseconds, so text order is time order. An end
  // sorts before a start at the same instant: a hand-over is not an overlap.
  const edges = intervals.flatMap((i) => [
    { at: i.start, d: 1, id: i.id },
    { at: i.end, d: -1, id: i.id },
  ]);
  edges.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : a.d - b.d));
  const open = new Set<string>();
  let most = 0;
  const over: string[][] = [];
  for (const e of edges) {
    if (e.d > 0) open.add(e.id);
    else open.delete(e.id);
    most = Math.max(most, open.size);
    if (e.d > 0 && open.size > limit) over.push([...open]);
  }
  return { most, over };
}

export function checkKeys(jobs: FinalJob[], samples: KeySamples | undefined): { violations: string[]; figures: KeyFigures } {
  const keyed = jobs.filter((j) => j.concurrencyKey);
  const byKey = new Map<string, FinalJob[]>();
  for (const j of keyed) byKey.set(j.concurrencyKey!, [...(byKey.get(j.concurrencyKey!) ?? []), j]);
  const violations: string[] = [];
  const perKey: KeyFigures['perKey'] = {};
  let overlaps = 0;
  for (const [key, list] of [...byKey].sort(([a], [b]) => a.localeCompare(b))) {
    const limit = list[0]!.concurrencyLimit ?? 1;
    // The last attempt ran from its claim to the job's end: succeeded or dead, both left from
    // running (the chaos run cancels nothing; a cancelled job may have ended while pending).
    const intervals = list
      .filter((j) => (j.state === 'succeeded' || j.state === 'dead') && j.claimedAt && j.finishedAt)
      .map((j) => ({ id: j.id, start: j.claimedAt!, end: j.finishedAt! }));
    const { most, over } = sweep(intervals, limit);
    overlaps += over.length;
    for (const ids of over.slice(0, 3)) {
      const spans = ids.map((id) => {
        const i = intervals.find((x) => x.id === id)!;
        return `${id} ${i.start.slice(11)}–${i.end.slice(11)}`;
      });
      violations.push(`key ${key} (limit ${limit}): ${ids.length} jobs ran at once: ${spans.join(', ')}`);
    }
    if (over.length > 3) violations.push(`key ${key}: … and ${over.length - 3} more moments over its limit`);
    perKey[key] = { limit, jobs: list.length, recorded: most, sampled: samples?.most[key] ?? 0 };
  }
  for (const s of samples?.over ?? [])
    violations.push(`key ${s.key} (limit ${s.limit}): ${s.running} jobs running at ${s.at} (sampled from the job table)`);
  return {
    violations,
    figures: {
      jobs: keyed.length,
      keys: byKey.size,
      perKey,
      overlaps: overlaps + (samples?.over.length ?? 0),
      samples: samples?.samples ?? 0,
    },
  };
}
