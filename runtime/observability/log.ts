// Structured JSON logs (pino). Every line about a job carries jobId, type, attempt and workerId,
// so one job's story can be pulled out of CloudWatch Logs with a single filter.
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(name: string, level = process.env.LOG_LEVEL ?? 'info'): Logger {
  return pino({ name, level, base: { service: name }, timestamp: pino.stdTimeFunctions.isoTime });
}

/** A logger that writes nothing (tests, benchmarks). */
export const silentLogger: Logger = pino({ level: 'silent' });
