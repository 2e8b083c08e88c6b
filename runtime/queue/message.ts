// The job message: only the job's id (and its type, for people reading a queue). Everything
// else — state, attempts, payload — is read from the job row when the message arrives.

import { isJobId } from '../domain/ids.ts';

export interface JobMessage {
  jobId: string;
  type?: string;
}

export function jobMessageBody(jobId: string, type?: string): string {
  return JSON.stringify(type ? { jobId, type } : { jobId });
}

/** The job id a body names, or the reason it names none (the message is poison). */
export function parseJobMessage(body: string): { ok: true; message: JobMessage } | { ok: false; reason: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return { ok: false, reason: 'body is not JSON' };
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return { ok: false, reason: 'body is not a JSON object' };
  const jobId = (parsed as Record<string, unknown>).jobId;
  if (typeof jobId !== 'string' || !isJobId(jobId)) return { ok: false, reason: 'body has no jobId (a UUID)' };
  const type = (parsed as Record<string, unknown>).type;
  return { ok: true, message: { jobId: jobId.toLowerCase(), ...(typeof type === 'string' ? { type } : {}) } };
}
