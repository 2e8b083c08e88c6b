// The OpenAPI 3.1 document of the API, built from the kernel's route tables and their zod
// schemas (kernel.ts), the same ones that answer requests: a route added to a table is documented
// with its parameters, body and the error shape without a second description to keep in step.

import * as z from 'zod';
import type { Route } from './kernel.ts';

const ERROR_SCHEMA = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['code', 'message'],
      properties: {
        code: {
          type: 'string',
          description:
            'machine-readable, e.g. invalid_field, not_found, method_not_allowed, unavailable (the database unreachable), busy (a statement timeout, lock wait or deadlock; rolled back)',
        },
        message: { type: 'string', description: 'the field, the rule and the fix, for a person' },
        field: { type: 'string', description: 'the field, parameter or header at fault' },
        requestId: { type: 'string', description: 'on a 5xx: quote it when reporting' },
      },
    },
  },
};

function jsonSchema(s: z.ZodType): Record<string, unknown> {
  const { $schema: _drop, ...rest } = z.toJSONSchema(s, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  return rest;
}

/**
 * The OpenAPI 3.1 document of `tables`, from the same routes and schemas that answer requests:
 * each route's path parameters, query, body and the error shape; `schemas` adds named components
 * (the job types' payloads).
 */
export function openApiDocument(
  info: { title: string; version: string; description?: string },
  tables: { routes: Route[]; security: 'none' | 'client' | 'operator' }[],
  schemas: Record<string, z.ZodType> = {},
): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  const errorRef = { $ref: '#/components/responses/Error' };
  for (const t of tables) {
    for (const r of t.routes) {
      const path = r.path.replace(/:([A-Za-z]+)/g, '{$1}');
      const parameters = [
        ...Object.entries(r.params ?? {}).map(([name, s]) => ({ name, in: 'path', required: true, schema: jsonSchema(s) })),
        ...Object.entries(r.query?.shape ?? {}).map(([name, s]) => ({
          name,
          in: 'query',
          required: !(s as z.ZodType).safeParse(undefined).success,
          schema: jsonSchema(s as z.ZodType),
        })),
      ];
      (paths[path] ??= {})[r.method.toLowerCase()] = {
        summary: r.summary,
        ...(t.security !== 'none' ? { security: [{ [t.security === 'operator' ? 'operatorToken' : 'apiToken']: [] }] } : {}),
        ...(parameters.length ? { parameters } : {}),
        ...(r.body
          ? { requestBody: { required: r.bodyRequired ?? false, content: { 'application/json': { schema: jsonSchema(r.body) } } } }
          : {}),
        responses: { '200': { description: 'the answer, as JSON' }, '4XX': errorRef, '5XX': errorRef },
      };
    }
  }
  return {
    openapi: '3.1.0',
    info,
    paths,
    components: {
      schemas: { Error: ERROR_SCHEMA, ...Object.fromEntries(Object.entries(schemas).map(([k, s]) => [k, jsonSchema(s)])) },
      responses: {
        Error: {
          description: 'an error: `{ error: { code, message, field? } }`',
          content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
        },
      },
      securitySchemes: {
        apiToken: { type: 'http', scheme: 'bearer', description: 'API_TOKEN (the ERP clients) or API_OPERATOR_TOKEN' },
        operatorToken: { type: 'http', scheme: 'bearer', description: 'API_OPERATOR_TOKEN, the on-call operator token' },
      },
    },
  };
}
