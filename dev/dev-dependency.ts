// The local stack's packages (embedded PostgreSQL, the SQS emulator) are development
// dependencies: the bundled `jobs` command in the worker image leaves them out
// (scripts/bundle.ts). Importing one there fails with a message that says so, not a resolver
// stack trace.

export async function importDevDependency<T>(name: string, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (err) {
    if ((err as { code?: string }).code === 'ERR_MODULE_NOT_FOUND') {
      throw new Error(
        `the local stack needs the development dependency ${name}, which this build of the jobs command does not carry: run \`jobs local\` (npm start) from a checkout after npm ci`,
        { cause: err },
      );
    }
    throw err;
  }
}
