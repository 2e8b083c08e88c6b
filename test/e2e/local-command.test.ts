// `jobs local` (npm start) as a person stops it: the supervisor runs the stack in a session of
// its own and forwards one SIGTERM; a second signal on top (a `kill` of every process, an
// impatient Ctrl-C) must not cut the orderly stop short, or postgres is left running.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { waitFor } from '../support/platform.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
const leftovers: number[] = [];
let cwd: string | undefined;

afterAll(async () => {
  for (const pid of leftovers) if (alive(pid)) process.kill(pid, 'SIGKILL');
  if (cwd) await rm(cwd, { recursive: true, force: true });
});

describe('jobs local', () => {
  it('stops in order — services, then postgres — even when the stack gets SIGTERM twice', async () => {
    // A folder of its own: the stack writes .jobs-local there, never over a developer's running one.
    cwd = await mkdtemp(join(tmpdir(), 'jobs-local-cmd-'));
    const supervisor = spawn(
      process.execPath,
      ['--import', join(ROOT, 'node_modules/tsx/dist/loader.mjs'), join(ROOT, 'bin/jobs.ts'), 'local', '--workers', '1'],
      {
        cwd,
        env: { ...process.env, LOG_LEVEL: 'warn' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let output = '';
    supervisor.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    supervisor.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    leftovers.push(supervisor.pid!);
    await waitFor(() => output.includes('Ctrl-C stops everything.'), 60_000, `the stack to start; output so far:\n${output}`);

    const pids = (await readFile(join(cwd, '.jobs-local', 'pids'), 'utf8')).split('\n').filter(Boolean).map(Number);
    leftovers.push(...pids);
    const postgres = pids.find(
      (pid) =>
        execFileSync('ps', ['-o', 'comm=', '-p', String(pid)])
          .toString()
          .trim() === 'postgres',
    );
    expect(postgres, `a postgres among ${pids.join(', ')}`).toBeDefined();
    // The supervisor's child running the stack (tsx may have started an esbuild service beside it).
    const children = execFileSync('pgrep', ['-P', String(supervisor.pid), '-f', 'bin/jobs.ts local'])
      .toString()
      .trim()
      .split('\n')
      .filter(Boolean);
    expect(children, 'one stack process under the supervisor').toHaveLength(1);
    const stack = Number(children[0]);
    leftovers.push(stack);

    // A second `jobs local` in the same folder (newcomer review: it SIGKILLed the running stack's
    // processes as leftovers, then failed on its bad port): refused, the first stack untouched.
    const second = (...args: string[]) => {
      try {
        execFileSync(
          process.execPath,
          ['--import', join(ROOT, 'node_modules/tsx/dist/loader.mjs'), join(ROOT, 'bin/jobs.ts'), 'local', ...args],
          {
            cwd,
            env: { ...process.env, LOG_LEVEL: 'warn' },
            stdio: 'pipe',
            timeout: 60_000,
          },
        );
        return { code: 0, stderr: '' };
      } catch (err) {
        const e = err as { status: number; stderr: Buffer };
        return { code: e.status, stderr: e.stderr.toString() };
      }
    };
    expect(second('--api-port', '99999')).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--api-port must be a port number from 1 to 65535 (got 99999)'),
    });
    const refused = second('--workers', '0');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`a local stack is already running or starting here (pid ${stack}, API http://127.0.0.1:`);
    expect(refused.stderr).not.toMatch(/\n\s+at /); // the message, no stack trace
    expect(output).not.toContain('left by an earlier run');
    for (const pid of pids) expect(alive(pid), `process ${pid} of the running stack`).toBe(true);

    // A worker killed by hand while the stack runs is said (newcomer review: the stack stayed silent).
    const worker = Number(
      execFileSync('pgrep', ['-P', String(stack), '-f', 'bin/jobs.ts worker'])
        .toString()
        .trim()
        .split('\n')[0],
    );
    process.kill(worker, 'SIGKILL');
    await waitFor(() => output.includes(`(pid ${worker}) exited (killed by SIGKILL)`), 10_000, 'the stack to say the worker died');

    const exited = new Promise<number | null>((r) => supervisor.once('exit', (code) => r(code)));
    // The stack directly, then — while it stops — the supervisor, which forwards another SIGTERM.
    // (Two SIGTERMs sent at the same instant can arrive as one: signals do not queue.)
    process.kill(stack, 'SIGTERM');
    await waitFor(() => output.includes('stopping the local stack'), 10_000, 'the stack to start stopping');
    supervisor.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(output).toMatch(/already stopping/);
    expect(output).toMatch(/stopped\./);
    expect(alive(postgres!), 'postgres still running after the stop').toBe(false);
    for (const pid of pids) expect(alive(pid), `process ${pid} still running`).toBe(false);
    expect(output).not.toMatch(/the API \(pid \d+\) exited/);
    for (const f of ['lock', 'env', 'pids']) expect(existsSync(join(cwd, '.jobs-local', f)), `.jobs-local/${f} left`).toBe(false); // the orderly stop is not reported as a death
  }, 90_000);
});
