// Errors for the SQS wire (sqs-wire.ts): SQS's error answers turned into errors shaped and named
// as the SDK's (awsQueryCompatible JSON: x-amzn-query-error first, then the body's __type, the
// Query-API code mapped to the error shape's name), and which errors the standard retry mode of
// @smithy/core/retry (3.x) tries again, with what it costs.

import type { IncomingHttpHeaders } from 'node:http';

/** An HTTP answer, read whole. */
export interface WireResponse {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
}

export interface SqsMetadata {
  httpStatusCode?: number;
  requestId?: string;
  attempts?: number;
  totalRetryDelay?: number;
  clockSkewCorrected?: boolean;
}

/** An error SQS answered, shaped as the SDK's: `name` is the error's code as the SDK names it. */
export class SqsServiceError extends Error {
  readonly $fault: 'client' | 'server';
  $metadata: SqsMetadata;
  /** From x-amzn-query-error: the Query-API code and fault type (e.g. AWS.SimpleQueueService.NonExistentQueue, Sender). */
  readonly Code: string | undefined;
  readonly Type: string | undefined;
  /** The Retry-After header, when SQS sent one. */
  readonly retryAfter: string | undefined;

  constructor(name: string, message: string, o: { status: number; requestId?: string; code?: string; type?: string; retryAfter?: string }) {
    super(message);
    this.name = name;
    this.$fault = o.status < 500 ? 'client' : 'server';
    this.$metadata = { httpStatusCode: o.status, ...(o.requestId ? { requestId: o.requestId } : {}) };
    this.Code = o.code;
    this.Type = o.type;
    this.retryAfter = o.retryAfter;
  }
}

// SQS's Query-API error codes whose error shape has another name (@aws-sdk/client-sqs's schemas,
// trait awsQueryError); any other code is its own name. test/queue/sqs-wire.test.ts checks this
// against the SDK's schemas.
const QUERY_CODE_NAMES: Record<string, string> = {
  'AWS.SimpleQueueService.BatchEntryIdsNotDistinct': 'BatchEntryIdsNotDistinct',
  'AWS.SimpleQueueService.BatchRequestTooLong': 'BatchRequestTooLong',
  'AWS.SimpleQueueService.EmptyBatchRequest': 'EmptyBatchRequest',
  'AWS.SimpleQueueService.InvalidBatchEntryId': 'InvalidBatchEntryId',
  'AWS.SimpleQueueService.MessageNotInflight': 'MessageNotInflight',
  'AWS.SimpleQueueService.NonExistentQueue': 'QueueDoesNotExist',
  'AWS.SimpleQueueService.PurgeQueueInProgress': 'PurgeQueueInProgress',
  'AWS.SimpleQueueService.QueueDeletedRecently': 'QueueDeletedRecently',
  'AWS.SimpleQueueService.TooManyEntriesInBatchRequest': 'TooManyEntriesInBatchRequest',
  'AWS.SimpleQueueService.UnsupportedOperation': 'UnsupportedOperation',
  'KMS.AccessDeniedException': 'KmsAccessDenied',
  'KMS.DisabledException': 'KmsDisabled',
  'KMS.InvalidKeyUsageException': 'KmsInvalidKeyUsage',
  'KMS.InvalidStateException': 'KmsInvalidState',
  'KMS.NotFoundException': 'KmsNotFound',
  'KMS.OptInRequired': 'KmsOptInRequired',
  'KMS.ThrottlingException': 'KmsThrottled',
  QueueAlreadyExists: 'QueueNameExists',
};

/** The SDK's name for an SQS error code (a Query-API code, a shape name or a `namespace#Shape` __type). */
export function sqsErrorName(raw: string): string {
  let code = raw.split(',')[0]!.split(':')[0]!;
  if (code.includes('#')) code = code.split('#')[1]!;
  return QUERY_CODE_NAMES[code] ?? code;
}

// @smithy/core/retry (3.x), standard mode: what is retried, and what it costs.
const THROTTLING_NAMES = new Set([
  'BandwidthLimitExceeded',
  'EC2ThrottledException',
  'LimitExceededException',
  'PriorRequestNotComplete',
  'ProvisionedThroughputExceededException',
  'RequestLimitExceeded',
  'RequestThrottled',
  'RequestThrottledException',
  'SlowDown',
  'ThrottledException',
  'Throttling',
  'ThrottlingException',
  'TooManyRequestsException',
  'TransactionInProgressException',
]);
const TRANSIENT_NAMES = new Set(['TimeoutError', 'RequestTimeout', 'RequestTimeoutException']);
const TRANSIENT_STATUS = new Set([500, 502, 503, 504]);
const NETWORK_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);
export const MAX_RETRY_DELAY_MS = 20_000;
export const RETRY_QUOTA = 500;
export const RETRY_COST = { throttling: 5, transient: 14 } as const;
/** The signer's threshold: an offset this large, newly learned, makes the failed request worth retrying. */
export const CLOCK_SKEW_MS = 240_000;

export type Failure = Error & { code?: string; $metadata?: SqsMetadata; retryAfter?: string; cause?: unknown };

export function retryKind(err: Failure, depth = 0): 'throttling' | 'transient' | null {
  const status = err.$metadata?.httpStatusCode;
  if (depth === 0 && (status === 429 || THROTTLING_NAMES.has(err.name))) return 'throttling';
  if (err.name === 'AbortError') return null;
  if (
    err.$metadata?.clockSkewCorrected ||
    TRANSIENT_NAMES.has(err.name) ||
    NETWORK_CODES.has(err.code ?? '') ||
    TRANSIENT_STATUS.has(status ?? 0) ||
    (err.name === 'InvalidSignatureException' && err.message.includes('Signature expired'))
  ) {
    return 'transient';
  }
  return err.cause instanceof Error && depth < 10 ? retryKind(err.cause as Failure, depth + 1) : null;
}

export function serviceError(res: WireResponse): Failure {
  const str = (v: unknown) => (typeof v === 'string' && v !== '' ? v : undefined);
  const header = (name: string) => {
    const v = res.headers[name];
    return str(Array.isArray(v) ? v[0] : v);
  };
  let data: Record<string, unknown> = {};
  try {
    const parsed: unknown = res.text ? JSON.parse(res.text) : {};
    if (parsed && typeof parsed === 'object') data = parsed as Record<string, unknown>;
  } catch (err) {
    // A proxy's or load balancer's page: a SyntaxError, as the SDK throws; its status decides on a retry.
    const e = err as Failure;
    e.message = `${e.message}\n  Deserialization error: HTTP ${res.status}, body ${JSON.stringify(res.text.slice(0, 200))}`;
    e.$metadata = { httpStatusCode: res.status };
    return e;
  }
  const [queryCode, queryType] = (header('x-amzn-query-error') ?? '').split(';');
  const code = str(queryCode) ?? str(data.Code) ?? str(data.code) ?? header('x-amzn-errortype') ?? str(data.__type) ?? 'Unknown';
  const retryAfter = header('retry-after');
  const requestId = header('x-amzn-requestid') ?? header('x-amzn-request-id') ?? header('x-amz-request-id');
  return new SqsServiceError(sqsErrorName(code), str(data.message) ?? str(data.Message) ?? 'UnknownError', {
    status: res.status,
    ...(requestId ? { requestId } : {}),
    ...(queryCode ? { code: queryCode } : {}),
    ...(queryType ? { type: queryType } : {}),
    ...(retryAfter ? { retryAfter } : {}),
  });
}
