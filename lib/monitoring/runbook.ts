// The runbook every alarm points to. Each alarm names its section by anchor; the test suite
// checks each anchor is a heading of docs/runbooks/README.md, so a renamed section cannot
// leave an alarm pointing nowhere.

export const RUNBOOK_PATH = 'docs/runbooks/README.md';

export const RUNBOOK_SECTION = {
  dlqNotEmpty: 'dlq-not-empty',
  urgentDlqNotEmpty: 'urgent-dlq-not-empty',
  dlqOldestMessageAge: 'dlq-oldest-message-age',
  urgentDlqOldestMessageAge: 'urgent-dlq-oldest-message-age',
  queueOldestMessageAge: 'job-queue-oldest-message-age',
  urgentQueueOldestMessageAge: 'urgent-job-queue-oldest-message-age',
  leasesLost: 'leases-lost',
  jobsDeadLettered: 'jobs-dead-lettered',
  api5xx: 'api-5xx',
  workerTasksBelowMinimum: 'worker-tasks-below-minimum',
  jobsStuck: 'jobs-stuck',
  workersSilent: 'workers-silent',
  scheduleFailing: 'schedule-failing',
  publishingFailing: 'publishing-failing',
  passwordRotationFailing: 'database-password-rotation-failing',
  databaseSecretUnreadable: 'database-secret-unreadable',
  databasePasswordNotRotated: 'database-password-not-rotated',
  databaseLoginsRefused: 'database-logins-refused',
  claimsFailing: 'claims-failing',
  sqsCallsFailing: 'sqs-calls-failing',
  apiUnhealthyTargets: 'api-unhealthy-targets',
  apiTasksBelowMinimum: 'api-tasks-below-minimum',
  workerAtMaximum: 'worker-at-maximum-with-backlog',
  databaseCpu: 'database-cpu',
  databaseFreeStorage: 'database-free-storage',
  databaseFreeableMemory: 'database-freeable-memory',
  databaseConnections: 'database-connections',
} as const;

export type RunbookSection = (typeof RUNBOOK_SECTION)[keyof typeof RUNBOOK_SECTION];

export function runbookRef(section: RunbookSection): string {
  return `${RUNBOOK_PATH}#${section}`;
}
