// How a schema's verdict on some input reads to a person, for every layer that checks input with
// zod (the HTTP kernel, the enqueue request): the field an issue names, and the status its rule
// means. Typed by shape, so this layer needs no validator.

/** The field an issue names: its path joined (`payload.entries`, `jobs.3.payload.entries` for an item of a list). */
export function issueField(issue: { path: readonly PropertyKey[] }, fallback = 'body'): string {
  const keys: string[] = [];
  for (const k of issue.path) {
    if (typeof k !== 'string' && typeof k !== 'number') break;
    keys.push(String(k));
  }
  return keys.length > 0 ? keys.join('.') : fallback;
}

/**
 * The status an issue's rule means: a custom issue may carry `params.status` (413 for a size
 * over a limit, 422 when a job type's parse says so); everything else is a 400.
 */
export function issueStatus(issue: { code: string; params?: Record<string, unknown> }): 400 | 413 | 422 {
  const s = issue.code === 'custom' ? issue.params?.status : undefined;
  return s === 413 || s === 422 ? s : 400;
}
