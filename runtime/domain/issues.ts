// How a schema's verdict on some input reads to a person, for every layer that checks input with
// zod (the HTTP kernel, the enqueue request): the field an issue names, and the status its rule
// means. Typed by shape, so this layer needs no validator.

/**
 * The field an issue names: its path's keys joined (`payload.entries`). An index names an item
 * when a key follows it (`jobs.3.payload.entries`: an item of a list of objects); a list of plain
 * values is named as the list (`ids`), its message saying which item.
 */
export function issueField(issue: { path: readonly PropertyKey[] }, fallback = 'body'): string {
  const keys: string[] = [];
  const path = issue.path;
  for (let i = 0; i < path.length; i++) {
    const k = path[i];
    if (typeof k === 'string') keys.push(k);
    else if (typeof k === 'number' && typeof path[i + 1] === 'string') keys.push(String(k));
    else break;
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
