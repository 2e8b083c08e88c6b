// The database credentials of a service (API or worker) started with DATABASE_SECRET_ARN: read
// again hourly and on a refused login (db/credentials.ts), each failed read counted and the
// secret's age reported, so the "database secret unreadable" and "database password not rotated"
// alarms hear from every task.
import { type DatabaseCredentialSource, databaseCredentialSource } from '../db/credentials.ts';
import type { Logger } from '../observability/log.ts';
import { METRIC } from '../observability/metric-names.ts';
import type { Metrics } from '../observability/metrics.ts';

export function serviceCredentials(o: {
  secretArn: string | undefined;
  databaseUrl: string;
  log: Logger;
  metrics: Metrics | null;
}): DatabaseCredentialSource | undefined {
  if (!o.secretArn) return undefined;
  const { metrics } = o;
  return databaseCredentialSource({
    secretArn: o.secretArn,
    databaseUrl: o.databaseUrl,
    log: o.log,
    ...(metrics
      ? {
          onReadFailed: () => metrics.count(METRIC.databaseSecretReadsFailed),
          onAge: (ms: number) => metrics.timing(METRIC.databaseSecretAgeMs, ms),
        }
      : {}),
  });
}
