// Structured JSON logs (pino). Every line about a job carries jobId, type, attempt and workerId,
// so one job's story can be pulled out of CloudWatch Logs with a single filter.
//
// JOBS_LOG_FORMAT=pretty (the local stack sets it) prints the same lines for a person watching a
// terminal instead: time, level, service, message, then the fields as key=value, an error as
// its message and first stack frame. ECS keeps JSON (the default).
import { pino, type DestinationStream, type Logger } from 'pino';

export type { Logger };

export function createLogger(name: string, level = process.env.LOG_LEVEL ?? 'info', format = process.env.JOBS_LOG_FORMAT): Logger {
  const opts = { name, level, base: { service: name }, timestamp: pino.stdTimeFunctions.isoTime };
  return format === 'pretty' ? pino(opts, prettyStream(process.stdout)) : pino(opts);
}

/** A logger that writes nothing (tests, benchmarks). */
export const silentLogger: Logger = pino({ level: 'silent' });

const LEVELS: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO ', 40: 'WARN ', 50: 'ERROR', 60: 'FATAL' };
const OMIT = new Set(['level', 'time', 'msg', 'name', 'service', 'pid', 'hostname', 'err']);

/** One pino JSON line as a person reads it. */
export function prettyLine(json: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json.trimEnd();
  }
  const time = typeof o.time === 'string' ? o.time.slice(11, 23) : '';
  const fields = Object.entries(o)
    .filter(([k]) => !OMIT.has(k))
    .map(([k, v]) => `${k}=${typeof v === 'string' ? (/\s/.test(v) ? JSON.stringify(v) : v) : JSON.stringify(v)}`);
  const err = o.err as { message?: string; stack?: string } | undefined;
  const where = err?.stack
    ?.split('\n')
    .find((l) => l.trim().startsWith('at '))
    ?.trim();
  const errText = err ? `  ${err.message ?? 'error'}${where ? ` (${where})` : ''}` : '';
  return `${time} ${LEVELS[o.level as number] ?? String(o.level)} ${String(o.service ?? o.name ?? '')}: ${String(o.msg ?? '')}${fields.length ? `  ${fields.join(' ')}` : ''}${errText}`;
}

function prettyStream(out: NodeJS.WritableStream): DestinationStream {
  return { write: (line: string) => void out.write(`${prettyLine(line)}\n`) };
}
