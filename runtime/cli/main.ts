// The `jobs` command: run the services, migrate, and look at or enqueue jobs. Settings come
// from the environment; when a variable is unset and `jobs local` is running, its
// .jobs-local/env fills it in, so `jobs list` just works next to a local stack.

import { databaseUrlFromEnv, ENV } from '../config/env.ts';
import { ConfigError } from '../config/rules.ts';
import { migrate } from '../db/migrate.ts';
import { createPool } from '../db/pool.ts';
import { ReportedError, ValidationError } from '../domain/errors.ts';
import { parseCommand } from './args.ts';
import { UsageError } from './format.ts';
import { type Env, jobCommand } from './job-commands.ts';

export { formatJob, UsageError } from './format.ts';

const USAGE = `jobs — the ERP job platform

Usage:
  jobs local [--workers N] [--api-port P]     run everything locally (embedded PostgreSQL + local SQS + API + N workers)
  jobs local restart                          restart the running local stack's API and workers on your changed code (new migrations applied; its database and jobs kept)
  jobs migrate                                apply database migrations (idempotent, under a lock)
  jobs api                                    run the HTTP API service
  jobs worker                                 run a worker process
  jobs enqueue TYPE --payload JSON|@FILE|- [--key K] [--max-attempts N] [--run-at ISO] [--concurrency-key K [--concurrency-limit N]] [--lane urgent|bulk] [--json]
  jobs show ID [--json] [--watch [--interval S]]   --watch: live progress bar, attempt, lease owner and time left, until the job ends
  jobs cancel ID [--by WHO]                   cancel a pending or running job (a running handler is aborted at its next heartbeat)
  jobs list [--state S] [--type T] [--lane L] [--limit N] [--json]
  jobs types [--describe] [--json]            list the job types this build knows; --describe: each payload field
  jobs help [COMMAND [SUBCOMMAND]]            this text, or one command's usage (as \`jobs COMMAND --help\` prints it)

On-call (docs/runbooks/README.md):
  jobs dead list [--type T] [--lane L] [--since T] [--until T] [--discarded] [--limit N] [--json]
                                              dead jobs waiting for on-call, newest first; --discarded: those discarded too
  jobs dead show ID [--json]                  a dead job: its reason, each attempt's outcome and owner, what operators did
  jobs dead redrive (ID… | --type T | --lane L | --since T | --until T | --all) [--by WHO] [--reason R] [--max-attempts N] [--from-scratch] [--dry-run] [--json]
                                              back to pending with a fresh attempt budget, re-published, recorded
  jobs dead discard (ID… | --type T | --lane L | --since T | --until T | --all) --reason R [--by WHO] [--dry-run] [--json]
  jobs dlq list [--poison] [--lane L] [--limit N] [--json]   every lane's DLQ (or one), each message with its lane and what a redrive would do
  jobs dlq redrive [--lane L] [--dry-run] [--move] [--rate N] [--limit N] [--by WHO] [--json]   move dead letters back to their lane's queue, reconciled with the job table
  jobs dlq discard MESSAGE_ID… --reason R [--lane L] [--by WHO] [--json]
  jobs dlq move-status [--json]               the DLQ's SQS message move tasks (AWS)
  jobs dlq move-cancel TASK_HANDLE [--by WHO] [--json]   stop a running move task (AWS): what it moved stays moved, the rest stays in the DLQ
  jobs poison list [--reason R] [--since T] [--resolved] [--limit N] [--json]
  jobs stuck [--running-seconds N] [--pending-seconds N] [--limit N] [--json]
  jobs connections [--json]                   who holds the database's connections: count per application name and user
  jobs republish (ID… | --type T | --state pending --older-than D) [--by WHO] [--reason R] [--limit N] [--json]
                                              a fresh message for pending jobs whose message is lost (the reconciler does it within minutes)
  jobs schedules list [--next N] [--last N] [--json]   the schedules declared in code: next and last occurrences, paused or not
  jobs schedules pause NAME [--by WHO] [--reason R] [--json]     no occurrence is enqueued until it is resumed (recorded)
  jobs schedules resume NAME [--by WHO] [--reason R] [--json]    from the next occurrence; those that fell while paused are not enqueued (recorded)
  jobs schedules trigger NAME [--by WHO] [--reason R] [--again] [--json]   enqueue one of its jobs now (recorded); a schedule with a work key whose work is done enqueues nothing unless --again
  (T: an ISO 8601 time with an offset, or an age such as 30m, 6h, 2d)

Settings come from the environment (DATABASE_URL, JOBS_QUEUE_URL, …); next to a running
\`jobs local\`, unset ones are read from .jobs-local/env.`;

async function resolveEnv(): Promise<Env> {
  if (process.env.JOBS_LOCAL_ENV === '0') return process.env;
  const { readLocalEnv } = await import('../support/local-env.ts');
  const local = await readLocalEnv();
  // The real environment wins over the local stack's file.
  return { ...local, ...process.env };
}

/** Exit when the `jobs local` that started this process is gone (so a SIGKILLed parent leaves no orphans). */
function watchParent(): void {
  const ppid = Number(process.env.JOBS_PARENT_PID);
  if (!ppid) return;
  const timer = setInterval(() => {
    try {
      process.kill(ppid, 0);
    } catch {
      clearInterval(timer);
      process.kill(process.pid, 'SIGTERM');
    }
  }, 1000).unref();
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  const out = (s: string) => process.stdout.write(`${s}\n`);
  switch (command) {
    case undefined:
    case 'help':
    case '--help':
    case '-h': {
      // `jobs help dead redrive`: that command's usage, as `jobs dead redrive --help` prints it.
      const { positionals } = parseCommand('jobs help', rest, {}, { max: 2, what: 'COMMAND [SUBCOMMAND]' });
      if (positionals.length === 0) {
        out(USAGE);
        return 0;
      }
      const usage = usageFor(positionals);
      if (!usage) throw new UsageError(`unknown command "${positionals[0]}"\n\n${USAGE}`);
      out(`usage:\n${usage}`);
      return 0;
    }

    case 'local': {
      if (rest[0] === 'restart') {
        parseCommand('jobs local restart', rest.slice(1), {});
        const { restartLocalStack } = await import('../support/local-env.ts');
        out(await restartLocalStack());
        return 0;
      }
      const { values } = parseCommand('jobs local', rest, { workers: { type: 'string', default: '2' }, 'api-port': { type: 'string' } });
      const workers = Number(values.workers);
      if (!Number.isInteger(workers) || workers < 0 || workers > 32)
        throw new UsageError(`--workers must be a whole number from 0 to 32 (got ${values.workers})`);
      const apiPort = values['api-port'] === undefined ? undefined : Number(values['api-port']);
      if (apiPort !== undefined && (!Number.isInteger(apiPort) || apiPort < 1 || apiPort > 65535))
        throw new UsageError(`--api-port must be a port number from 1 to 65535 (got ${values['api-port']})`);
      if (process.env.JOBS_LOCAL_SUPERVISED !== '1') return superviseLocal(argv);
      watchParent();
      const { startLocalStack } = await import('../../dev/stack.ts');
      const { reportRestart } = await import('../support/local-env.ts');
      // `jobs local restart` (SIGHUP), which waits for the line this writes (support/local-env.ts).
      // Installed first: Node's default for SIGHUP ends the process, postgres left running. Asked
      // while the stack starts, the restart runs once it is up; while it stops, it is refused.
      let stack: Awaited<ReturnType<typeof startLocalStack>> | null = null;
      let stopping = false;
      let restartAsked = false;
      // Ctrl-C while the stack starts: postgres is starting too, and Node's default for the signal
      // would leave it running; the stop waits for the start, then stops everything in order.
      let stopAsked: string | null = null;
      const early = (sig: string) => () => {
        if (stopAsked) {
          // A second one: the start hangs (postgres not coming up). This process group is the
          // stack's own session (superviseLocal): postgres, SQS and the services with it.
          out(`${sig} again: killing the stack's processes now`);
          process.kill(-process.pid, 'SIGKILL');
        }
        stopAsked = sig;
        out(`${sig}: the stack stops once it has started… (again to kill it at once)`);
      };
      const earlyInt = early('SIGINT');
      const earlyTerm = early('SIGTERM');
      process.on('SIGINT', earlyInt);
      process.on('SIGTERM', earlyTerm);
      const restart = (s: NonNullable<typeof stack>) => {
        out('restarting the API and the workers on the current code…');
        void s
          .restart()
          .catch((err: unknown) => `restart failed: ${err instanceof Error ? err.message : String(err)}`)
          .then((line) => {
            out(line);
            return reportRestart(line);
          });
      };
      process.on('SIGHUP', () => {
        if (stopping) return void reportRestart('restart failed: the stack is stopping');
        if (stack) return restart(stack);
        restartAsked = true;
        out('restart asked while the stack starts: it runs once the stack is up');
      });
      const started = await startLocalStack({
        workers,
        demoSchedules: true,
        ...(apiPort !== undefined ? { apiPort } : {}),
      });
      stack = started;
      out('');
      out(`  API          ${started.apiUrl}   (live view: ${started.apiUrl}/)`);
      out(`  PostgreSQL   ${started.env.DATABASE_URL}`);
      out(`  SQS          ${started.sqs.endpoint}  bulk lane: queue ${started.sqs.queueName}, DLQ ${started.sqs.dlqName}`);
      out(`                urgent lane: queue ${started.sqs.urgentQueueName}, DLQ ${started.sqs.urgentDlqName}`);
      out(`  workers      ${workers} process${workers === 1 ? '' : 'es'}`);
      out(`  settings     .jobs-local/env  (other jobs commands read it)`);
      out('  schedules    every-minute-demo posts a small ledger batch every minute (jobs schedules list)');
      out('');
      out(`  try: npx tsx bin/jobs.ts enqueue ledger.post --payload '{"batch":"B-1","entries":10}'`);
      out('  after changing a handler: npx tsx bin/jobs.ts local restart   (keeps the database and its jobs)');
      out('  Ctrl-C stops everything.');
      process.off('SIGINT', earlyInt);
      process.off('SIGTERM', earlyTerm);
      if (restartAsked && !stopAsked) restart(started);
      await new Promise<void>((resolve) => {
        // Every signal is handled, not just the first: a second one (the supervisor's forward on
        // top of a `kill` of the whole group, an impatient Ctrl-C) must not kill this process
        // half-way, before postgres is stopped.
        const stop = (sig: string) => {
          if (stopping) return out(`${sig}: already stopping (workers drain, then postgres stops)…`);
          stopping = true;
          out(`\n${sig}: stopping the local stack…`);
          void started.stop().then(resolve);
        };
        process.on('SIGINT', () => stop('SIGINT'));
        process.on('SIGTERM', () => stop('SIGTERM'));
        if (stopAsked) stop(stopAsked);
      });
      out('stopped.');
      return 0;
    }

    case 'migrate': {
      parseCommand('jobs migrate', rest, {});
      const env = await resolveEnv();
      // Migrations change the schema: the administering URL when there is one (the local stack's
      // services and commands use a role without DDL, as deployed).
      const url = env[ENV.databaseAdminUrl]?.trim() || databaseUrlFromEnv(env);
      const pool = createPool({ url, max: 1, applicationName: 'jobs-migrate' });
      try {
        const r = await migrate(pool, { log: out });
        out(`migrations: ${r.applied.length} applied, ${r.alreadyApplied} already current`);
      } finally {
        await pool.end();
      }
      return 0;
    }

    case 'api': {
      parseCommand('jobs api', rest, {});
      watchParent();
      const { runApi } = await import('../apps/api.ts');
      await runApi(await resolveEnv());
      return -1; // keeps running
    }

    case 'worker': {
      parseCommand('jobs worker', rest, {});
      watchParent();
      const { runWorker } = await import('../apps/worker.ts');
      await runWorker(await resolveEnv());
      return -1;
    }

    // The job commands: the types, enqueue, show, cancel, list — runtime/cli/job-commands.ts.
    case 'types':
    case 'enqueue':
    case 'show':
    case 'cancel':
    case 'list':
      return jobCommand(command, rest, resolveEnv, out);

    // On-call (issue 7): dead jobs, the DLQ, poison messages, stuck jobs — runtime/cli/oncall.ts.
    case 'dead':
    case 'dlq':
    case 'poison':
    case 'stuck':
    case 'connections':
    case 'republish':
      return (await import('./oncall.ts')).opsCommand(command, rest, await resolveEnv(), out);

    // Schedules (issue 15): list, pause, resume, trigger — runtime/cli/schedules.ts.
    case 'schedules':
      return (await import('./schedules.ts')).schedulesCommand(rest, await resolveEnv(), out);

    default:
      throw new UsageError(`unknown command "${command}"\n\n${USAGE}`);
  }
}

/**
 * Ctrl-C sends SIGINT to the terminal's whole process group: postgres would stop at once,
 * before the workers finish draining against it. So `jobs local` runs the stack in a session of
 * its own and forwards one SIGTERM to it, which then stops things in order: workers and API
 * first, postgres last. If this process is killed outright, the stack notices (watchParent)
 * and stops itself the same way.
 */
async function superviseLocal(argv: string[]): Promise<number> {
  const { spawn } = await import('node:child_process');
  const child = spawn(process.execPath, [...process.execArgv, process.argv[1]!, ...argv], {
    detached: true,
    stdio: 'inherit',
    env: { ...process.env, JOBS_LOCAL_SUPERVISED: '1', JOBS_PARENT_PID: String(process.pid) },
  });
  const forward = () => {
    try {
      child.kill('SIGTERM');
    } catch {
      /* already gone */
    }
  };
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  return await new Promise<number>((resolve) => child.once('exit', (code) => resolve(code ?? 1)));
}

/**
 * The AWS SDK warns in every process that its 2027 releases will need Node 22. The images run
 * Node 22; on a Node 20 workstation the notice is known and only buries the output of the command
 * and of every process the local stack starts (they inherit the environment). The SDK's own
 * switch, so every other warning still shows.
 */
function quietSdkNodeVersionNotice(): void {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
}

/**
 * The usage lines of one command (and subcommand), from USAGE: what `jobs dead redrive --help`
 * prints, and what follows a usage error so the person sees the valid options.
 */
export function usageFor(argv: string[]): string | null {
  const [command, sub] = argv.filter((a) => !a.startsWith('-'));
  if (!command) return null;
  const lines = USAGE.split('\n');
  const picked: string[] = [];
  let taking = false;
  for (const line of lines) {
    const m = /^ {2}jobs (\S+)(?: (\S+))?/.exec(line);
    if (m) taking = m[1] === command && (!sub || !m[2] || m[2] === sub || !/^[a-z-]+(\|[a-z-]+)*$/.test(m[2]));
    else if (!/^ {10,}\S/.test(line)) taking = false;
    if (taking) picked.push(line);
  }
  // A subcommand this command does not have: show every form of the command.
  if (picked.length === 0 && sub) return usageFor([command]);
  return picked.length > 0 ? picked.join('\n') : null;
}

export async function cli(argv = process.argv.slice(2)): Promise<void> {
  quietSdkNodeVersionNotice();
  // A reader that stops early (`jobs list --json | head`) closes the pipe: the rest of the output
  // has nowhere to go, but the command still finishes what it was doing and exits with its code.
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code !== 'EPIPE') throw err;
    });
  }
  if (argv.length > 1 && (argv.includes('--help') || argv.includes('-h'))) {
    const usage = usageFor(argv);
    if (usage) {
      process.stdout.write(`usage:\n${usage}\n`);
      return exitAfterOutput(0);
    }
  }
  try {
    const code = await main(argv);
    if (code >= 0) await exitAfterOutput(code);
  } catch (err) {
    // node:util parseArgs reports an unknown or malformed option as ERR_PARSE_ARGS_*: a usage error.
    const parseArgsError =
      typeof (err as { code?: unknown }).code === 'string' && (err as { code: string }).code.startsWith('ERR_PARSE_ARGS');
    if (err instanceof UsageError || err instanceof ValidationError || err instanceof ConfigError || parseArgsError) {
      // Node's text for an unknown option goes on about positionals starting with '-': name the option alone.
      const unknown = /^Unknown option '([^']+)'/.exec((err as Error).message)?.[1];
      process.stderr.write(`jobs: ${unknown ? `unknown option ${unknown}` : (err as Error).message}\n`);
      const usage = err instanceof ConfigError ? null : usageFor(argv);
      if (usage) process.stderr.write(`usage:\n${usage}\n`);
      return exitAfterOutput(2);
    }
    // A failure that explains itself (a migration that cannot apply) is its message; anything else keeps its stack.
    const text = err instanceof ReportedError ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err);
    process.stderr.write(`jobs: ${text}\n`);
    await exitAfterOutput(1);
  }
}

/**
 * Exit once stdout and stderr have handed everything written to the operating system. On a pipe
 * Node writes asynchronously: a process.exit() right after a large write (`jobs list --json | jq`)
 * drops whatever the pipe's 64 KB buffer did not take, leaving invalid JSON. An empty write's
 * callback runs after every earlier write is flushed (or the stream failed: a closed reader).
 * The explicit exit stays because a command may leave handles open (an SDK's keep-alive sockets).
 */
async function exitAfterOutput(code: number): Promise<never> {
  process.exitCode = code;
  await Promise.all(
    [process.stdout, process.stderr].map(
      (stream) => new Promise<void>((resolve) => (stream.destroyed ? resolve() : stream.write('', () => resolve()))),
    ),
  );
  process.exit(code);
}
