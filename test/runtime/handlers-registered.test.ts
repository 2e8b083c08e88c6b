// A job type written but not registered: its own tests pass (the test kit takes the definition
// itself), the typed enqueue refuses it, and `jobs enqueue` (which loads the code afresh) would
// queue jobs no deployed worker runs. Every job definition a file of runtime/handlers/ exports is
// in JOB_DEFINITIONS (runtime/handlers/index.ts), or this test names it.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { JOB_DEFINITIONS } from '../../runtime/handlers/index.ts';

const DIR = join(import.meta.dirname, '../../runtime/handlers');

/** What defineJob returns: a type name, a run function and a payload parser. */
function isJobDefinition(v: unknown): v is { type: string } {
  const d = v as { type?: unknown; run?: unknown; parse?: unknown } | null;
  return typeof d === 'object' && d !== null && typeof d.type === 'string' && typeof d.run === 'function' && typeof d.parse === 'function';
}

describe('job handlers', () => {
  it('every job definition exported under runtime/handlers/ is registered in JOB_DEFINITIONS', async () => {
    const registered = new Set<unknown>(JOB_DEFINITIONS);
    const unregistered: string[] = [];
    let found = 0;
    for (const file of readdirSync(DIR).filter((f) => f.endsWith('.ts'))) {
      const mod = (await import(join(DIR, file))) as Record<string, unknown>;
      for (const [name, value] of Object.entries(mod)) {
        if (!isJobDefinition(value)) continue;
        found++;
        if (!registered.has(value)) {
          unregistered.push(
            `runtime/handlers/${file} exports ${name} (type ${value.type}), which runtime/handlers/index.ts does not register: add it to JOB_DEFINITIONS`,
          );
        }
      }
    }
    expect(unregistered).toEqual([]);
    expect(found).toBeGreaterThanOrEqual(JOB_DEFINITIONS.length);
  });
});
