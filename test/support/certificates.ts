// Certificates for TLS tests, made by openssl: a CA, a server certificate for DNS:localhost it
// signed, and an unrelated CA (test/runtime/database-tls.test.ts, test/queue/http1.test.ts).
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

const openssl = (args: string[], cwd: string) => execFileSync('openssl', args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });

/** A CA, a server certificate for DNS:localhost it signed, and an unrelated CA. */
export function makeCertificates(dir: string) {
  const ca = (name: string) => {
    openssl(
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        `${name}.key`,
        '-out',
        `${name}.pem`,
        '-days',
        '2',
        '-subj',
        `/CN=${name}`,
      ],
      dir,
    );
    return join(dir, `${name}.pem`);
  };
  const caFile = ca('test-root-ca');
  const otherCaFile = ca('some-other-ca');
  writeFileSync(join(dir, 'san.cnf'), 'subjectAltName=DNS:localhost\n');
  openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost'], dir);
  openssl(
    [
      'x509',
      '-req',
      '-in',
      'server.csr',
      '-CA',
      'test-root-ca.pem',
      '-CAkey',
      'test-root-ca.key',
      '-CAcreateserial',
      '-out',
      'server.pem',
      '-days',
      '2',
      '-extfile',
      'san.cnf',
    ],
    dir,
  );
  return { caFile, otherCaFile, certFile: join(dir, 'server.pem'), keyFile: join(dir, 'server.key') };
}
