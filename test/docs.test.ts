// The documents a newcomer reads point at things that exist: every test file and runtime path
// docs/design.md names is in the repository, and the README links nothing outside it.
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const read = (p: string) => readFileSync(`${ROOT}${p}`, 'utf8');

describe('docs', () => {
  it('docs/design.md names only files that exist, and each of the thirteen guarantees has a test', () => {
    const design = read('docs/design.md');
    const paths = [...design.matchAll(/`((?:test|runtime)\/[^`]+\.ts)`/g)].map((m) => m[1]!);
    expect(paths.length).toBeGreaterThan(20);
    expect(paths.filter((p) => !existsSync(`${ROOT}${p}`))).toEqual([]);
    const rows = design.split('\n').filter((l) => /^\| \d+ \|/.test(l));
    expect(rows).toHaveLength(13);
    for (const r of rows) expect(r, r.slice(0, 60)).toMatch(/`test\/[^`]+\.test\.ts`/);
  });

  it("the README's handler example is test/examples/invoices-post.ts, which its test runs", () => {
    const readme = read('README.md');
    const at = readme.indexOf('## Writing a job handler\n\n```ts\n') + '## Writing a job handler\n\n```ts\n'.length;
    const shown = readme.slice(at, readme.indexOf('```\n', at));
    expect(shown).toBe(read('test/examples/invoices-post.ts').replaceAll("'../../runtime/", "'./runtime/"));
  });

  it("the README's handler test is test/examples/testing-your-handler.test.ts, which npm test runs", () => {
    const readme = read('README.md');
    const section = readme.indexOf('## Testing your handler\n');
    const at = readme.indexOf('```ts\n', section) + '```ts\n'.length;
    expect(section).toBeGreaterThan(0);
    const shown = readme.slice(at, readme.indexOf('```\n', at));
    expect(shown).toBe(read('test/examples/testing-your-handler.test.ts'));
    expect(shown.split('\n').length - 1, 'under 40 lines').toBeLessThan(40);
  });

  it('every stack output a runbook or the deploy guide names as a <Placeholder> is one the stacks declare', () => {
    const declared = new Set(
      ['lib/stacks/data-stack.ts', 'lib/stacks/services-stack.ts'].flatMap((f) =>
        [...read(f).matchAll(/new CfnOutput\(this, '([A-Za-z0-9]+)'/g)].map((m) => m[1]!),
      ),
    );
    expect(declared.size).toBeGreaterThan(10);
    for (const doc of ['docs/runbooks/README.md', 'docs/deploy.md', 'README.md']) {
      // Output names are PascalCase ending in a noun the stacks use: …Arn, …Url, …Name, …Group, …Endpoint.
      const named = [...read(doc).matchAll(/<([A-Z][A-Za-z0-9]+(?:Arn|Url|Name|Group|Endpoint))>/g)].map((m) => m[1]!);
      expect(
        named.filter((n) => !declared.has(n)),
        doc,
      ).toEqual([]);
    }
  });

  it('the README links nothing outside the repository', () => {
    const links = [...read('README.md').matchAll(/\]\(([^)]+)\)/g)].map((m) => m[1]!);
    expect(links.filter((l) => l.startsWith('../') || /^https?:/.test(l))).toEqual([]);
    for (const l of links.filter((x) => !x.startsWith('#'))) expect(existsSync(`${ROOT}${l.split('#')[0]}`), l).toBe(true);
  });
});
