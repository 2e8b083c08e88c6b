#!/usr/bin/env -S node --import tsx
// The `jobs` command (see runtime/cli/main.ts). Run it with `npx tsx bin/jobs.ts …` or `npm run jobs -- …`.
import { cli } from '../runtime/cli/main.ts';

await cli();
