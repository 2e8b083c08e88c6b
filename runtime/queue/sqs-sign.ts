// Signature Version 4 for the SQS wire (sqs-wire.ts): one AWS JSON 1.0 POST to `/`, signed the way
// @smithy/signature-v4 signs it for the SDK (the same headers signed, x-amz-content-sha256 and the
// session token included), with node:crypto. test/queue/sqs-wire.test.ts holds the two to the
// same Authorization header for a fixed clock, credentials and request.
//
// The derived signing key depends only on the secret, the date and the region, so it is kept
// (one entry: a worker signs for one region with one set of credentials at a time) and derived
// again when the day or the credentials change.

import { createHmac, hash } from 'node:crypto';

export interface SqsCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  /** Temporary credentials (the ECS task role) carry one; it is sent and signed as x-amz-security-token. */
  sessionToken?: string;
}

export interface SqsRequestToSign {
  /** The Host header: host, and port when not the scheme's default (URL.host). */
  host: string;
  /** The operation, e.g. DeleteMessageBatch (sent as x-amz-target: AmazonSQS.<operation>). */
  operation: string;
  body: string;
  /** sha256 of the body, hex, when the caller has it already (a retry signs the same body again). */
  bodyHash?: string;
  region: string;
  credentials: SqsCredentials;
  date: Date;
}

export const SQS_CONTENT_TYPE = 'application/x-amz-json-1.0';

/** The last derived signing key: the secret, date and region it is for, and the key. */
export interface SigningKeyCache {
  last?: { secret: string; scope: string; key: Buffer };
}

/** One-shot (crypto.hash): half the CPU of createHash().update().digest() for a short string. */
export function sha256Hex(s: string): string {
  return hash('sha256', s, 'hex');
}

/** "20240102T030405Z" for 2024-01-02T03:04:05.678Z. */
export function amzDate(date: Date): string {
  const iso = date.toISOString();
  return `${iso.slice(0, 4)}${iso.slice(5, 7)}${iso.slice(8, 13)}${iso.slice(14, 16)}${iso.slice(17, 19)}Z`;
}

/**
 * The headers of the signed request: the ones signed, then Authorization. content-length is
 * the caller's to add (unsigned, as SigV4 allows).
 */
export function signSqsRequest(r: SqsRequestToSign, cache: SigningKeyCache = {}): Record<string, string> {
  const when = amzDate(r.date);
  const day = when.slice(0, 8);
  const bodyHash = r.bodyHash ?? sha256Hex(r.body);
  const token = r.credentials.sessionToken;
  // Sorted by name, as the canonical request lists them.
  const headers: Record<string, string> = {
    'content-type': SQS_CONTENT_TYPE,
    host: r.host,
    'x-amz-content-sha256': bodyHash,
    'x-amz-date': when,
    ...(token ? { 'x-amz-security-token': token } : {}),
    'x-amz-target': `AmazonSQS.${r.operation}`,
    // Asks SQS for its Query-API error codes (x-amzn-query-error), as the SDK does for SQS.
    'x-amzn-query-mode': 'true',
  };
  const names = Object.keys(headers);
  let canonicalHeaders = '';
  for (const n of names) canonicalHeaders += `${n}:${headers[n]}\n`;
  const signedHeaders = names.join(';');
  const canonicalRequest = `POST\n/\n\n${canonicalHeaders}\n${signedHeaders}\n${bodyHash}`;
  const scope = `${day}/${r.region}/sqs/aws4_request`;
  const stringToSign = `AWS4-HMAC-SHA256\n${when}\n${scope}\n${sha256Hex(canonicalRequest)}`;
  const signature = createHmac('sha256', signingKey(r.credentials.secretAccessKey, day, r.region, cache))
    .update(stringToSign, 'utf8')
    .digest('hex');
  headers.authorization = `AWS4-HMAC-SHA256 Credential=${r.credentials.accessKeyId}/${scope}, SignedHeaders=${signedHeaders}, Signature=${signature}`;
  return headers;
}

function signingKey(secret: string, day: string, region: string, cache: SigningKeyCache): Buffer {
  const scope = `${day}/${region}`;
  const last = cache.last;
  if (last && last.scope === scope && last.secret === secret) return last.key;
  const hmac = (key: string | Buffer, data: string) => createHmac('sha256', key).update(data, 'utf8').digest();
  const key = hmac(hmac(hmac(hmac(`AWS4${secret}`, day), region), 'sqs'), 'aws4_request');
  cache.last = { secret, scope, key };
  return key;
}
