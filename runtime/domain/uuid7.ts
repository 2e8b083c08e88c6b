// UUID version 7 (RFC 9562): 48 bits of Unix milliseconds, version and variant bits, random
// rest. Job ids are generated here (so enqueue can map rows back to its inputs) and sort by
// creation time, which the listing's keyset and the primary key's insert locality rely on.
import { randomFillSync } from 'node:crypto';

let lastMs = 0;
let seq = 0;
// Random bytes drawn 4 KiB at a time: one system call per 256 ids instead of one per id.
const pool = Buffer.alloc(4096);
let poolAt = pool.length;

function random16(): Buffer {
  if (poolAt + 16 > pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  const b = Buffer.from(pool.subarray(poolAt, poolAt + 16));
  poolAt += 16;
  return b;
}

export function uuidv7(now = Date.now()): string {
  const b = random16();
  // Same millisecond: count up in the 12 "rand_a" bits so ids from one process stay ordered.
  if (now <= lastMs) {
    seq = (seq + 1) & 0xfff;
    if (seq === 0) lastMs++;
    now = lastMs;
  } else {
    lastMs = now;
    seq = b.readUInt16BE(6) & 0x7ff;
  }
  b.writeUIntBE(now, 0, 6);
  b[6] = 0x70 | (seq >> 8);
  b[7] = seq & 0xff;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
