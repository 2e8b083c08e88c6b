// The layering rule of runtime/, read from the import graph (static and dynamic imports alike).
// Data flows one way: entry points (cli, bootstrap, rotation) → the services they start (apps) → the HTTP
// layer → the workers, maintenance loops, on-call services and live view → the job store → the
// queues, the database, the handlers and small support pieces → the domain, configuration and
// observability. A folder
// imports only from itself or from a layer below; no file imports itself back through a cycle;
// dev/ (the local stack and its faults) is reached only from the `jobs local` command; lib/ (the
// CDK app) imports only the runtime's pure configuration rules and names, never its I/O; testing/
// (the test kit for handler authors) sits on top of the runtime, which never imports it.
// No runtime file is over 400 lines, but for the few listed by name until they are split.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

const LAYERS: string[][] = [
  ['cli', 'bootstrap', 'rotation'],
  ['apps'],
  ['http'],
  ['worker', 'maintenance', 'oncall', 'live'],
  ['store'],
  ['queue', 'db', 'handlers', 'support'],
  ['domain', 'config', 'observability'],
];
const rank = new Map(LAYERS.flatMap((folders, i) => folders.map((f) => [f, i] as const)));

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? files(p) : p.endsWith('.ts') ? [p] : [];
  });
}

const IMPORT = /(?:from|import)\s*\(?\s*['"](\.{1,2}\/[^'"]+)['"]/g;
function importsOf(file: string): string[] {
  const src = readFileSync(file, 'utf8');
  return [...src.matchAll(IMPORT)].map((m) => resolve(dirname(file), m[1]!));
}

const rel = (p: string) => relative(ROOT, p);
/** runtime/<folder>/… → folder */
const folderOf = (p: string) => rel(p).split('/')[1]!;

describe('architecture', () => {
  const runtime = files(join(ROOT, 'runtime'));
  const graph = new Map(runtime.map((f) => [f, importsOf(f)]));

  it('every runtime folder has a layer', () => {
    const folders = new Set(runtime.map(folderOf));
    expect(
      [...folders].filter((f) => !rank.has(f)),
      'folders without a layer: add them to LAYERS',
    ).toEqual([]);
  });

  it('imports go downward only: a folder imports itself or a lower layer', () => {
    const upward: string[] = [];
    for (const [file, targets] of graph) {
      const from = folderOf(file);
      for (const t of targets) {
        const r = rel(t);
        if (!r.startsWith('runtime/')) continue;
        const to = folderOf(t);
        if (to !== from && !(rank.get(to)! > rank.get(from)!)) upward.push(`${rel(file)} → ${r} (${from} may not import ${to})`);
      }
    }
    expect(upward).toEqual([]);
  });

  it('no import cycle between files', () => {
    const cycles: string[] = [];
    const state = new Map<string, 'open' | 'done'>();
    const stack: string[] = [];
    const visit = (f: string) => {
      state.set(f, 'open');
      stack.push(f);
      for (const t of graph.get(f) ?? []) {
        if (!graph.has(t)) continue;
        if (state.get(t) === 'open') cycles.push([...stack.slice(stack.indexOf(t)), t].map(rel).join(' → '));
        else if (!state.has(t)) visit(t);
      }
      stack.pop();
      state.set(f, 'done');
    };
    for (const f of graph.keys()) if (!state.has(f)) visit(f);
    expect(cycles).toEqual([]);
  });

  // No file in runtime/ over 400 lines: a file that long holds more than one concern, so it is
  // split along a real seam, not squeezed. The files still over it are listed here by name, each
  // with why; whoever splits one removes it, and an entry back under the limit fails the test
  // until it is removed, so the list only shrinks.
  const MAX_LINES = 400;
  const OVER_THE_LIMIT_FOR_NOW: Record<string, string> = {};
  it(`no runtime file is over ${MAX_LINES} lines, except the ones listed for now`, () => {
    const lines = new Map(runtime.map((f) => [rel(f), readFileSync(f, 'utf8').split('\n').length - 1]));
    const over = [...lines].filter(([f, n]) => n > MAX_LINES && !(f in OVER_THE_LIMIT_FOR_NOW)).map(([f, n]) => `${f}: ${n} lines`);
    expect(over, `split these along a seam (one concern per file)`).toEqual([]);
    const stale = Object.keys(OVER_THE_LIMIT_FOR_NOW).filter((f) => (lines.get(f) ?? 0) <= MAX_LINES);
    expect(stale, 'under the limit now (or gone): remove them from OVER_THE_LIMIT_FOR_NOW').toEqual([]);
  });

  it('runtime/ reaches dev/ (the local stack) only from the jobs local command', () => {
    const reaches = [...graph].flatMap(([file, targets]) =>
      targets.filter((t) => rel(t).startsWith('dev/')).map((t) => `${rel(file)} → ${rel(t)}`),
    );
    expect(reaches).toEqual(['runtime/cli/main.ts → dev/stack.ts']);
  });

  it('testing/ (the test kit, erp-jobs/testing) imports the runtime and the embedded PostgreSQL only; the runtime never imports it', () => {
    const kit = files(join(ROOT, 'testing'));
    const bad = kit.flatMap((file) =>
      importsOf(file)
        .map(rel)
        .filter((t) => !t.startsWith('runtime/') && !t.startsWith('testing/') && t !== 'dev/embedded-pg.ts')
        .map((t) => `${rel(file)} → ${t}`),
    );
    expect(bad).toEqual([]);
    const reaches = [...graph].flatMap(([file, targets]) => [
      ...targets.filter((t) => rel(t).startsWith('testing/')).map((t) => `${rel(file)} → ${rel(t)}`),
      ...(/['"]erp-jobs\/testing['"]/.test(readFileSync(file, 'utf8')) ? [`${rel(file)} → erp-jobs/testing`] : []),
    ]);
    expect(reaches).toEqual([]);
  });

  it('lib/ (the CDK app) imports only the runtime’s pure rules and names', () => {
    const allowed = [
      'runtime/config/env.ts',
      'runtime/config/rules.ts',
      'runtime/config/stuck-thresholds.ts',
      'runtime/config/retention.ts',
      // JOBS_SQS_* rules (SQS_HTTP_CLIENTS): config only, no SDK.
      'runtime/config/sqs.ts',
      'runtime/observability/metric-names.ts',
      'runtime/bootstrap/handler.ts',
    ];
    const bad = files(join(ROOT, 'lib')).flatMap((file) =>
      importsOf(file)
        .map(rel)
        .filter((t) => t.startsWith('runtime/') && !allowed.includes(t))
        .map((t) => `${rel(file)} → ${t}`),
    );
    expect(bad).toEqual([]);
    // The bootstrap handler is imported for its types only: nothing of its I/O runs at synth.
    const boot = readFileSync(join(ROOT, 'lib/schema-bootstrap.ts'), 'utf8');
    expect(boot).toMatch(/import type \{[^}]*\} from '\.\.\/runtime\/bootstrap\/handler\.ts'/);
  });
});
