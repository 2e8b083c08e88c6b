// The workers the live view lists: those the event feed has heard from (presence pings, events)
// and those known only from a lease they hold (a worker whose events do not reach the feed).

/** One worker as the live view lists it. */
export interface WorkerView {
  id: string;
  /** ms since its last event or presence ping; null when known only from a lease. */
  lastSeenMsAgo: number | null;
  pid: number | null;
  leases: number;
  /** alive: pinged recently; silent: no word for a while (killed, paused, partitioned); down: stopped gracefully. */
  status: 'alive' | 'silent' | 'down';
}

/** No word for this long: the worker reads as silent (killed, paused, partitioned). */
const SILENT_AFTER_MS = 5000;

/** The feed's workers and the leases' owners, merged; one gone for a minute with nothing held is dropped. */
export function workerViews(
  heard: ReadonlyMap<string, { lastSeen: number; pid?: number; down: boolean }>,
  leases: readonly { owner: string }[],
  now = Date.now(),
): WorkerView[] {
  const workers = new Map<string, WorkerView>();
  for (const [id, w] of heard) {
    const ago = now - w.lastSeen;
    workers.set(id, {
      id,
      lastSeenMsAgo: ago,
      pid: w.pid ?? null,
      leases: 0,
      status: w.down ? 'down' : ago > SILENT_AFTER_MS ? 'silent' : 'alive',
    });
  }
  for (const l of leases) {
    const w = workers.get(l.owner) ?? { id: l.owner, lastSeenMsAgo: null, pid: null, leases: 0, status: 'alive' as const };
    w.leases++;
    workers.set(l.owner, w);
  }
  // Gone for a minute with nothing held: drop it from the list.
  const shown = [...workers.values()].filter((w) => w.leases > 0 || w.lastSeenMsAgo === null || w.lastSeenMsAgo < 60_000);
  shown.sort((a, b) => a.id.localeCompare(b.id, 'en', { numeric: true }));
  return shown;
}
