// What the platform shows of its job types, checked against the registry it was built with rather
// than a hand-written list (issue 18 §5): registering an application's handler (invoices.post in
// runtime/handlers/index.ts) must not break a platform test. Used by the API, OpenAPI, enqueue and
// CLI tests with the default registry, and by test/api/registered-types.test.ts with an extra type.
import { expect } from 'vitest';
import type { JobRegistry } from '../../runtime/handlers/registry.ts';
import { call } from '../api/support.ts';

/** The end of the message that refuses an unknown type: every registered type, sorted. */
export function knownTypes(registry: JobRegistry): string {
  return `known types: ${registry.types().join(', ')}`;
}

/** A pattern for the refusal of `type`: `unknown job type "<type>"; known types: <all of them>`. */
export function unknownTypeMessage(type: string, registry: JobRegistry): RegExp {
  const text = `unknown job type "${type}"; ${knownTypes(registry)}`;
  return new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
}

/** GET /v1/job-types lists every registered type, sorted, each with its description. */
export async function expectJobTypesListed(apiUrl: string, registry: JobRegistry, headers: Record<string, string> = {}): Promise<void> {
  const r = await call(apiUrl, 'GET', '/v1/job-types', { headers });
  expect(r.status).toBe(200);
  const listed = r.body.jobTypes as { type: string; description: string }[];
  expect(listed.map((t) => t.type)).toEqual(registry.types());
  for (const t of listed) expect(t.description, t.type).toBe(registry.get(t.type)!.description);
}

/** The OpenAPI document has a payload schema for every registered type with one, and the enqueue body refers to each. */
export function expectOpenApiTypes(doc: any, registry: JobRegistry): void {
  const withSchema = registry.types().filter((t) => registry.get(t)!.schema);
  for (const t of withSchema) expect(doc.components.schemas[t], t).toMatchObject({ type: 'object' });
  const payload = doc.paths['/v1/jobs'].post.requestBody.content['application/json'].schema.properties.payload;
  expect(payload.anyOf).toEqual(withSchema.map((t) => ({ $ref: `#/components/schemas/${t}` })));
}
