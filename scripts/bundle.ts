// Bundles one deployable with esbuild: `tsx scripts/bundle.ts api|worker|bootstrap`.
// Output: dist/<name>/index.mjs (ESM, Node 22, every dependency inlined, source map beside it)
// and dist/<name>/migrations/*.sql, where runtime/db/migrate.ts looks for them. The Dockerfiles
// run this in their build stage; the final images carry only dist/<name>.

import { cp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

export const ENTRIES = {
  api: 'runtime/api/main.ts',
  worker: 'runtime/worker/main.ts',
  bootstrap: 'runtime/bootstrap/handler.ts',
} as const;
export type BundleName = keyof typeof ENTRIES;

export async function bundle(name: BundleName, outRoot = join(ROOT, 'dist')): Promise<string> {
  const outdir = join(outRoot, name);
  await rm(outdir, { recursive: true, force: true });
  await build({
    entryPoints: [join(ROOT, ENTRIES[name])],
    outfile: join(outdir, 'index.mjs'),
    bundle: true,
    platform: 'node',
    target: 'node22',
    format: 'esm',
    mainFields: ['module', 'main'],
    // pg and other CommonJS dependencies require node built-ins: give the ESM bundle a real `require`.
    banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
    // pg-native is an optional peer that pg loads only when asked to.
    external: ['pg-native'],
    sourcemap: true,
    minify: false,
    legalComments: 'linked',
    logLevel: 'warning',
  });
  await cp(join(ROOT, 'runtime', 'db', 'migrations'), join(outdir, 'migrations'), { recursive: true });
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
