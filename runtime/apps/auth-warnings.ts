// What the API's start log warns about its bearer tokens (api.ts): routes open to anyone, or the
// on-call routes open to every ERP client.

import { ENV } from '../config/env.ts';

/** What the start log warns about the bearer tokens: routes open to anyone, or on-call routes open to every ERP client. */
export function authWarnings(config: { apiToken?: string | undefined; operatorToken?: string | undefined }): string[] {
  const onCall = '/v1/dead-jobs, /v1/dlq, /v1/poison-messages, /v1/stuck-jobs, /v1/pending-jobs, /v1/schedules';
  if (!config.apiToken && !config.operatorToken) {
    return [
      `${ENV.apiToken} and ${ENV.apiOperatorToken} are not set: every /v1 route, the on-call ones (${onCall}) included, accepts requests without a bearer token`,
    ];
  }
  if (!config.operatorToken) {
    return [
      `${ENV.apiOperatorToken} is not set: the on-call routes (${onCall}) share the ERP clients' ${ENV.apiToken}, so any ERP client may redrive and discard dead jobs, drain the DLQ and read raw dead letters`,
    ];
  }
  if (!config.apiToken)
    return [
      `${ENV.apiToken} is not set: the /v1 job routes accept requests without a bearer token (the on-call routes need ${ENV.apiOperatorToken})`,
    ];
  return [];
}
