// The id and time patterns every layer shares (runtime/domain/ids.ts).
import { describe, expect, it } from 'vitest';
import { isJobId, JOB_ID_SHAPE, parseIsoTime } from '../../runtime/domain/ids.ts';
import { uuidv7 } from '../../runtime/domain/uuid7.ts';

describe('job ids', () => {
  it('accepts a UUID in canonical form, either case, and nothing else', () => {
    const id = uuidv7();
    expect(isJobId(id)).toBe(true);
    expect(isJobId(id.toUpperCase())).toBe(true);
    expect(isJobId('00000000-0000-4000-8000-000000000000')).toBe(true);
    for (const bad of ['', 'nope', `${id}x`, ` ${id}`, id.replaceAll('-', ''), '-'.repeat(36), `{${id}}`])
      expect(isJobId(bad), bad).toBe(false);
  });

  it('finds an id inside a line (JOB_ID_SHAPE)', () => {
    const id = uuidv7();
    expect(new RegExp(`committed (${JOB_ID_SHAPE})`).exec(`committed ${id}\n`)?.[1]).toBe(id);
  });
});

describe('parseIsoTime', () => {
  it('reads a date, or a date-time with an explicit offset', () => {
    expect(parseIsoTime('2026-10-31T06:00:00Z')?.toISOString()).toBe('2026-10-31T06:00:00.000Z');
    expect(parseIsoTime('2026-10-31T08:00:00.5+02:00')?.toISOString()).toBe('2026-10-31T06:00:00.500Z');
    expect(parseIsoTime('2026-10-31')?.toISOString()).toBe('2026-10-31T00:00:00.000Z');
  });

  it('refuses a time without an offset, what Date would guess at, and what names no instant', () => {
    for (const bad of ['2026-10-31T06:00:00', '1', 'yesterday', '2026-13-01', '2026-10-31T25:00Z', '', ' 2026-10-31'])
      expect(parseIsoTime(bad), bad).toBeNull();
    expect(parseIsoTime(undefined)).toBeNull();
  });
});
