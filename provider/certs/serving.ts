// The kubelet serving certificate: obtained through a CertificateSigningRequest
// with signer kubernetes.io/kubelet-serving, stored under the state dir, and
// renewed before expiry. kube-controller-manager signs such requests but never
// approves them, so the agent approves its own when its RBAC allows (vkvm up);
// otherwise the approver in the vkvm controllers (controllers/serving-approver.ts) does.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { KubeClients } from '../kube/client.js';
import { apiStatusCode } from '../kube/errors.js';
import type { Logger } from '../log.js';
import { certFacts, renewalTime, type CsrSubject } from './csr.js';
import { writeAtomic } from '../atomic-file.js';
import { approveCertificateRequest, ensurePrivateDir, requestCertificate } from './csr-api.js';

export const KUBELET_SERVING_SIGNER = 'kubernetes.io/kubelet-serving';

export interface ServingPair {
  certPem: string;
  keyPem: string;
}

export interface ServingCertOptions {
  nodeName: string;
  ipAddresses: string[];
  dnsNames: string[];
  dir: string;
  approve: boolean;
  issueTimeoutMs?: number;
}

export class ServingCertManager {
  private timer: NodeJS.Timeout | undefined;
  #stopped = false;
  /** Ends obtain()'s wait between attempts early (on stop). */
  private wake: (() => void) | undefined;
  private readonly certPath: string;
  private readonly keyPath: string;

  constructor(
    private readonly clients: KubeClients,
    private readonly opts: ServingCertOptions,
    private readonly log: Logger,
  ) {
    this.certPath = join(opts.dir, 'kubelet-serving.crt');
    this.keyPath = join(opts.dir, 'kubelet-serving.key');
  }

  private subject(): CsrSubject {
    return {
      commonName: `system:node:${this.opts.nodeName}`,
      organizations: ['system:nodes'],
      dnsNames: this.opts.dnsNames,
      ipAddresses: this.opts.ipAddresses,
    };
  }

  /** A stored pair is reused when it covers our names and is not yet due for renewal. */
  private async loadUsable(now: Date): Promise<ServingPair | null> {
    let pair: ServingPair;
    try {
      pair = { certPem: await readFile(this.certPath, 'utf8'), keyPem: await readFile(this.keyPath, 'utf8') };
    } catch {
      return null;
    }
    const facts = certFacts(pair.certPem);
    const covers =
      this.opts.ipAddresses.every((ip) => facts.ipAddresses.includes(ip)) && this.opts.dnsNames.every((d) => facts.dnsNames.includes(d));
    const fresh = now < new Date(facts.notBefore.getTime() + (facts.notAfter.getTime() - facts.notBefore.getTime()) * 0.7);
    return covers && fresh ? pair : null;
  }

  /** stop() was called: no more requests, obtain() rejects. */
  get stopped(): boolean {
    return this.#stopped;
  }

  /** Returns a valid pair, requesting one if needed. */
  async ensure(): Promise<ServingPair> {
    const existing = await this.loadUsable(new Date());
    if (existing) {
      this.log.info({ path: this.certPath }, 'reusing kubelet serving certificate');
      return existing;
    }
    return this.request();
  }

  /**
   * A valid pair, however long it takes: a request that times out (no
   * approver yet) or is denied is logged and made again with capped back-off,
   * as the kubelet keeps asking. Rejects only once stop() was called.
   */
  async obtain(retry: { initialMs: number; maxMs: number } = { initialMs: 30_000, maxMs: 300_000 }): Promise<ServingPair> {
    for (let delayMs = retry.initialMs; ; delayMs = Math.min(delayMs * 2, retry.maxMs)) {
      try {
        return await this.ensure();
      } catch (err) {
        if (this.#stopped) throw new Error('stopped before a serving certificate was issued', { cause: err });
        this.log.warn(
          { err, retryInS: Math.round(delayMs / 1000) },
          'no kubelet serving certificate yet: kubectl logs/exec/attach cannot reach this node until one is issued',
        );
        await new Promise<void>((resolve) => {
          this.wake = resolve;
          this.timer = setTimeout(resolve, delayMs * (0.9 + Math.random() * 0.2));
        });
        if (this.#stopped) throw new Error('stopped before a serving certificate was issued', { cause: err });
      }
    }
  }

  /** Calls onRotate with each renewed pair until stop(). */
  scheduleRenewal(current: ServingPair, onRotate: (pair: ServingPair) => void): void {
    const at = renewalTime(certFacts(current.certPem));
    // setTimeout overflows past ~24.8 days; re-check at most daily.
    const delayMs = Math.min(Math.max(at.getTime() - Date.now(), 1000), 24 * 3600 * 1000);
    this.timer = setTimeout(async () => {
      try {
        const pair = at.getTime() <= Date.now() ? await this.request() : current;
        if (pair !== current) onRotate(pair);
        this.scheduleRenewal(pair, onRotate);
      } catch (err) {
        this.log.warn({ err }, 'serving certificate renewal failed; retrying in 1 min');
        this.timer = setTimeout(() => this.scheduleRenewal(current, onRotate), 60_000);
      }
    }, delayMs);
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.timer);
    this.wake?.();
  }

  async request(): Promise<ServingPair> {
    const { csrName, certPem, keyPem } = await requestCertificate(this.clients, {
      namePrefix: `vkvm-serving-${this.opts.nodeName}`,
      signerName: KUBELET_SERVING_SIGNER,
      usages: ['digital signature', 'server auth'],
      subject: this.subject(),
      ...(this.opts.issueTimeoutMs ? { issueTimeoutMs: this.opts.issueTimeoutMs } : {}),
      onCreated: async (name) => {
        this.log.info({ csr: name }, 'requested kubelet serving certificate');
        if (this.opts.approve) await this.approve(name);
      },
    });
    await ensurePrivateDir(this.opts.dir);
    await writeAtomic(this.keyPath, keyPem, 0o600);
    await writeAtomic(this.certPath, certPem, 0o644);
    this.log.info({ csr: csrName, notAfter: certFacts(certPem).notAfter }, 'kubelet serving certificate issued');
    return { certPem, keyPem };
  }

  private async approve(name: string): Promise<void> {
    try {
      // The cluster's approver (vkvm controllers) may have decided already.
      const approved = await approveCertificateRequest(this.clients, name, {
        reason: 'VkvmNodeSelfApproved',
        message: 'approved by the vkvm node agent for its own serving certificate',
      });
      if (!approved) return;
      this.log.info({ csr: name }, 'approved own serving CSR');
    } catch (err) {
      const code = apiStatusCode(err);
      if (code === 409) return; // decided by the cluster approver meanwhile
      if (code !== 403) throw err;
      this.log.warn({ csr: name }, 'not allowed to approve own serving CSR; waiting for a cluster approver');
    }
  }
}
