#!/usr/bin/env -S npx tsx
// The CDK app: `npx cdk synth -c env=<dev|staging|prod> [-c apiCertificateArn=ARN] [-c alarmEmails=A,B] [-c alarmEndpoints=URL,…] [-c guard=true]`.
// Everything else is in lib/. The certificate and the on-call addresses on the command line win
// over lib/config.ts; staging and prod refuse to synthesize without a certificate, or without an
// address that delivers. guard=true runs the Control Tower rules too (the
// tests always do).
import { App } from 'aws-cdk-lib';
import { buildJobPlatform } from '../lib/app.ts';
import { ALARM_EMAILS_CONTEXT_KEY, ALARM_ENDPOINTS_CONTEXT_KEY, CERTIFICATE_CONTEXT_KEY, resolveConfig } from '../lib/config.ts';

const app = new App();
let config: ReturnType<typeof resolveConfig>;
try {
  config = resolveConfig(app.node.tryGetContext('env'), undefined, {
    apiCertificateArn: app.node.tryGetContext(CERTIFICATE_CONTEXT_KEY),
    alarmEmails: app.node.tryGetContext(ALARM_EMAILS_CONTEXT_KEY),
    alarmEndpoints: app.node.tryGetContext(ALARM_ENDPOINTS_CONTEXT_KEY),
  });
} catch (err) {
  console.error((err as Error).message);
  process.exit(1);
}
buildJobPlatform(app, config, { guard: String(app.node.tryGetContext('guard')) === 'true' });
app.synth();
