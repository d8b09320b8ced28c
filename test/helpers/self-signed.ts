// A throwaway self-signed certificate and its EC key, made by openssl (the tool the kubeadm docs use), for tests
// of code that reads certificates.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export function selfSigned(subject: string, days: number): { certPem: string; keyPem: string } {
  const dir = mkdtempSync(join(tmpdir(), 'vkvm-self-signed-'));
  try {
    const [key, cert] = [join(dir, 'k'), join(dir, 'c')];
    const args = ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', key, '-out', cert];
    execFileSync('openssl', [...args, '-subj', subject, '-days', String(days)], { stdio: 'ignore' });
    return { certPem: readFileSync(cert, 'utf8'), keyPem: readFileSync(key, 'utf8') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
