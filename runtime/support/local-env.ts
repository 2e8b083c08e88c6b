// Where `jobs local` (dev/stack.ts) writes the connection settings of the stack it runs, and how
// the other jobs commands read them: next to a running local stack, `jobs list` just works. Here,
// not in dev/, because every jobs command reads it, the bundled one in the worker image too, and
// createJobClient names it when an ERP script runs beside a stack without its settings.

import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { ReportedError } from '../domain/errors.ts';

export const LOCAL_DIR = '.jobs-local';

/**
 * Whether `pid` is a live process whose command line has one of `markers` (from /proc, else from
 * `ps`, as on macOS). A PID written by an earlier run may have been reused by an unrelated
 * process since.
 */
export function isLiveProcessOf(pid: number, markers: string[]): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch {
    return false; // gone, or another user's (EPERM): not one this stack started
  }
  try {
    const text = existsSync('/proc/self/cmdline')
      ? readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ')
      : execFileSync('ps', ['-o', 'command=', '-p', String(pid)], { encoding: 'utf8' });
    return markers.some((m) => text.includes(m));
  } catch {
    return false;
  }
}

/** The `jobs local` process that wrote the env file (its first line says), or null. */
export function localStackPid(text: string): number | null {
  const m = /\(pid (\d+)\)/.exec(text.split('\n', 1)[0] ?? '');
  return m ? Number(m[1]) : null;
}

/**
 * Read .jobs-local/env (KEY=value lines) if it exists and the `jobs local` that wrote it still
 * runs: a file left by a stack killed outright, or by a start that failed, names a database that
 * is gone, and the command then says to start one rather than fail to connect.
 */
export async function readLocalEnv(dir = LOCAL_DIR): Promise<Record<string, string>> {
  const file = resolve(dir, 'env');
  if (!existsSync(file)) return {};
  const text = await readFile(file, 'utf8');
  if (!writerRuns(text)) return {};
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = /^([A-Z_][A-Z0-9_]*)=(.*)$/.exec(line.trim());
    if (m) out[m[1]!] = m[2]!;
  }
  return out;
}

/** Whether the `jobs local` that wrote an env file's text still runs (a file without its PID: assumed so). */
function writerRuns(text: string): boolean {
  const pid = localStackPid(text);
  return pid === null || isLiveProcessOf(pid, ['jobs.ts', 'jobs local']);
}

/** The env file of a local stack running in `dir` (relative to the working directory), or null. */
export function liveLocalEnvFile(dir = LOCAL_DIR): string | null {
  const file = resolve(dir, 'env');
  try {
    return writerRuns(readFileSync(file, 'utf8')) ? `${dir}/env` : null;
  } catch {
    return null; // no file (or unreadable): no stack here
  }
}

/** Where the stack writes how its last restart went (`jobs local restart` waits for it). */
const RESTART_FILE = 'restarted';

/** The stack's side: say how a restart went, for the `jobs local restart` waiting on it. */
export async function reportRestart(line: string, dir = LOCAL_DIR): Promise<void> {
  await writeFile(resolve(dir, RESTART_FILE), `${line}\n`).catch(() => undefined);
}

/**
 * `jobs local restart`: signal the stack running here (SIGHUP) and wait for it to say how the
 * restart went: its workers drain first, so this takes up to its drain time and the API's start.
 */
export async function restartLocalStack(dir = LOCAL_DIR, timeoutMs = 120_000): Promise<string> {
  const file = resolve(dir, 'env');
  const pid = existsSync(file) ? localStackPid(await readFile(file, 'utf8')) : null;
  if (pid === null || !isLiveProcessOf(pid, ['jobs.ts', 'jobs local']))
    throw new ReportedError(
      `no local stack is running in ${resolve(dir, '..')} (start one with \`npm start\`; it begins with an empty database)`,
    );
  const report = resolve(dir, RESTART_FILE);
  await rm(report, { force: true });
  process.kill(pid, 'SIGHUP');
  for (const deadline = Date.now() + timeoutMs; Date.now() < deadline; ) {
    await new Promise((r) => setTimeout(r, 200));
    const line = existsSync(report) ? (await readFile(report, 'utf8')).trim() : '';
    if (line.startsWith('restart failed')) throw new ReportedError(`${line} (the stack's terminal has the details)`);
    if (line) return line;
    if (!isLiveProcessOf(pid, ['jobs.ts', 'jobs local']))
      throw new ReportedError(`the local stack (pid ${pid}) ended while restarting: see its terminal`);
  }
  throw new ReportedError(`the local stack (pid ${pid}) did not finish restarting within ${timeoutMs / 1000} s: see its terminal`);
}
