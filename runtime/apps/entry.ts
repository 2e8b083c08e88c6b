// What both services do as a process: start, refuse a bad configuration with exit 1 and its
// message, and on SIGTERM or SIGINT shut down gracefully, then exit 0 (1 if the shutdown failed).

import { ConfigError } from '../config/rules.ts';

export async function runService<S extends { shutdown(reason: string): Promise<void> }>(name: string, start: () => Promise<S>): Promise<S> {
  let svc: S;
  try {
    svc = await start();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${name}: refusing to start.\n${err.message}\n`);
      process.exit(1);
    }
    throw err;
  }
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.once(sig, () => {
      svc.shutdown(sig).then(
        () => process.exit(0),
        (err: unknown) => {
          process.stderr.write(`${name}: shutdown failed: ${String(err)}\n`);
          process.exit(1);
        },
      );
    });
  }
  return svc;
}
