// Where `jobs local` (dev/stack.ts) writes the connection settings of the stack it runs, and how
// the other jobs commands read them: next to a running local stack, `jobs list` just works. Here,
// not in dev/, because every jobs command reads it, the bundled one in the worker image too.

import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';

export const LOCAL_DIR = '.jobs-local';

/** Read .jobs-local/env (KEY=value lines) if it exists. */
export async function readLocalEnv(dir = LOCAL_DIR): Promise<Record<string, string>> {
  const file = resolve(dir, 'env');
  if (!existsSync(file)) return {};
  const out: Record<string, string> = {};
  for (const line of (await readFile(file, 'utf8')).split('\n')) {
    const m = /^([A-Z_][A-Z0-9_]*)=(.*)$/.exec(line.trim());
    if (m) out[m[1]!] = m[2]!;
  }
  return out;
}
