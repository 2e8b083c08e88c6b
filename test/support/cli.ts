// The `jobs` command for test files that run it dozens of times: bundled once per file by
// scripts/bundle.ts (the build the worker image carries for operators' one-off tasks) and run by
// plain node. A command starts in about 0.4 s this way, against 0.9 s through `node --import tsx
// bin/jobs.ts` and 1.9 s through `npx tsx bin/jobs.ts`: the runbook check alone runs 60-odd
// commands. `bin/jobs.ts` through tsx stays tested where it is the point: `jobs local`, the
// watch and pipe tests, and the first runbook command, run as written.
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bundle } from '../../scripts/bundle.ts';

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

let built: Promise<{ root: string; file: string }> | undefined;

/** The bundled `jobs` command's file (built on first use in this test file). */
export async function jobsBundle(): Promise<string> {
  built ??= (async () => {
    const root = await mkdtemp(join(tmpdir(), 'jobs-cli-'));
    return { root, file: join(await bundle('cli', root), 'jobs.mjs') };
  })();
  return (await built).file;
}

/** Removes this file's bundle (afterAll). */
export async function removeJobsBundle(): Promise<void> {
  if (!built) return;
  const { root } = await built;
  built = undefined;
  await rm(root, { recursive: true, force: true });
}

/** Runs `jobs ARGS…` (the bundle) to its end; a non-zero exit is a result, not a throw. */
export async function runJobs(
  args: string[],
  options: { env: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number; input?: string },
): Promise<Run> {
  const file = await jobsBundle();
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [file, ...args],
      { cwd: options.cwd, env: options.env, timeout: options.timeoutMs ?? 60_000, maxBuffer: 10 * 1024 * 1024 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    if (options.input !== undefined) child.stdin?.end(options.input);
  });
}
