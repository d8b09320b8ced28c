// A second node agent joins the real control plane from only a bootstrap
// token and the CA hash (vkvm token create → vkvm join), with a client
// certificate from the real CSR API (approved by kube-controller-manager) and
// a serving certificate approved by the vkvm controllers; pods run on it and `kubectl logs` reaches it through the
// apiserver. Wrong inputs and a missing package stop the join and leave
// nothing behind; `vkvm reset` removes the Node and the state, and the host
// can join again.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm, symlink, mkdir } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { V1CertificateSigningRequest } from '@kubernetes/client-node';
import { freePort } from '../../deploy/cluster/cluster.js';
import { GUEST_BOOT_MARKER } from '../../vmm/guest/build.js';
import { obtainClientCertificate } from '../../provider/certs/client.js';
import { signedBy } from '../../provider/certs/csr.js';
import { loadKubeConfig, makeClients, mergePatch } from '../../provider/kube/client.js';
import { installClusterManifests } from '../../provider/cli/up.js';
import { bootstrapTokenSecret, generateBootstrapToken } from '../../provider/join/bootstrap-token.js';
import { acceptsConnections } from '../../provider/join/join.js';
import { links } from '../../provider/network/host.js';
import { importTestGuest } from '../../provider/images/test-guest-images.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import { localNodeRanges } from '../../provider/controllers/serving-policy.js';
import {
  CLI,
  condition,
  controllersIdentity,
  csrs,
  killLaunchersOf,
  kubevirtIn,
  poll,
  qemuPids,
  qemuPidsOf,
  removeNetworkOf,
  smokeVmiSpec,
  startTestCluster,
  testGuestPod,
  testLog,
  testNamespace,
  vmiOf,
  waitFor,
} from './framework/index.js';

const NODE = 'vkvm-e2e-joined';
const NS = 'e2e-join';

interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

function runCli(args: string[], env: NodeJS.ProcessEnv = process.env, timeoutMs = 600_000): Promise<CliResult> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: Date.now() - started });
    });
  });
}

/** The flags the printed join command carries, plus --token overrides. */
function parseJoinCommand(line: string): { server: string; token: string; hash: string } {
  const m = /^vkvm join --server (\S+) --token (\S+) --discovery-token-ca-cert-hash (sha256:[0-9a-f]{64})$/.exec(line.trim());
  if (!m) throw new Error(`not a join command: ${line}`);
  return { server: m[1]!, token: m[2]!, hash: m[3]! };
}

/** Something listens on this loopback port. */
const accepts = (port: number): Promise<boolean> => acceptsConnections('127.0.0.1', port);

const csrSummary = (c: V1CertificateSigningRequest) => ({
  signerName: c.spec.signerName,
  username: c.spec.username,
  approved: c.status?.conditions?.find((x) => x.type === 'Approved')?.reason,
  issued: Boolean(c.status?.certificate),
});

t.test('a host joins from a bootstrap token and the CA hash, serves pods, resets and joins again', async (t) => {
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const controllerClients = await controllersIdentity(cluster);
  // As vkvm up configures its approver: this host's networks, and its hostname (the agent's DNS SAN beside the node name).
  const servingCsr = {
    nodeIpRanges: localNodeRanges(),
    dnsPattern: hostname()
      .toLowerCase()
      .replace(/[.*+?^${}()|[\]\\]/g, '\\$&'),
  };
  const runControllers = () =>
    startControllers(controllerClients, testLog.child({ component: 'controllers' }), { leaseDurationS: 5, retryPeriodMs: 500, servingCsr });
  let controllers = runControllers();
  t.teardown(() => controllers.stop());
  const caPem = await readFile(join(cluster.stateDir, 'pki', 'ca.crt'), 'utf8');

  const parent = await mkdtemp(join(tmpdir(), 'vkvm-e2e-join-'));
  // QEMU (unprivileged) must reach VM disks below the state dir.
  await chmod(parent, 0o711);
  const stateDir = join(parent, 'state');
  const kubeletPort = await freePort();
  // One bridge per agent: agents of concurrent tests share the host's network stack.
  const bridge = `vkt${randomBytes(4).toString('hex')}`;
  const joinFlags = [
    `--state-dir=${stateDir}`,
    `--run-dir=${join(parent, 'run')}`,
    `--node-name=${NODE}`,
    `--kubelet-port=${kubeletPort}`,
    `--bridge=${bridge}`,
    '--healthz-port=0',
    '--no-systemd',
  ];
  t.teardown(async () => {
    // However the test ended: no agent, VM or state is left.
    await runCli(['reset', `--state-dir=${stateDir}`, '--grace-period-s=0']);
    await killLaunchersOf(stateDir);
    await removeNetworkOf(stateDir, bridge);
    await rm(parent, { recursive: true, force: true });
  });
  const ns = await testNamespace(t, cluster, NS);

  const created = await runCli(['token', 'create', `--kubeconfig=${cluster.kubeconfigPath}`, '--ttl=1h']);
  t.equal(created.code, 0, `token create succeeds: ${created.stderr}`);
  const { server, token, hash } = parseJoinCommand(created.stdout);
  t.comment(`token create took ${created.ms} ms`);

  await t.test('wrong inputs and a host without a required package stop the join and leave nothing written', async (t) => {
    const expired = generateBootstrapToken();
    await cluster.clients.core.createNamespacedSecret({
      namespace: 'kube-system',
      body: bootstrapTokenSecret(expired, { description: 'expired', expiration: new Date(Date.now() - 60_000) }),
    });
    // A PATH that has QEMU and libvirtd but not qemu-img.
    const bin = join(parent, 'bin-without-qemu-img');
    await mkdir(bin);
    await symlink('/usr/bin/qemu-system-x86_64', join(bin, 'qemu-system-x86_64'));
    await symlink('/usr/sbin/libvirtd', join(bin, 'libvirtd'));
    const cases = [
      {
        what: 'wrong CA hash',
        args: ['--token', token, '--discovery-token-ca-cert-hash', `sha256:${'0'.repeat(64)}`],
        env: process.env,
        want: /cluster CA does not match --discovery-token-ca-cert-hash/,
      },
      {
        what: 'unknown token',
        args: ['--token', 'abcdef.0123456789abcdef', '--discovery-token-ca-cert-hash', hash],
        env: process.env,
        want: /bootstrap token id "abcdef".*unknown or expired/,
      },
      {
        what: 'expired token',
        args: ['--token', `${expired.id}.${expired.secret}`, '--discovery-token-ca-cert-hash', hash],
        env: process.env,
        want: new RegExp(`bootstrap token id "${expired.id}".*unknown or expired`),
      },
      {
        what: 'missing qemu-img',
        args: ['--token', token, '--discovery-token-ca-cert-hash', hash],
        env: { ...process.env, PATH: bin },
        want: /preflight failed; nothing was changed[\s\S]*VirtualizationPackages: not found in PATH: qemu-img[\s\S]*apt-get install/,
      },
    ];
    for (const c of cases) {
      const r = await runCli(['join', '--server', server, ...c.args, ...joinFlags], c.env);
      t.match(
        { code: r.code, stderr: r.stderr, stateDirExists: existsSync(stateDir) },
        { code: 1, stderr: c.want, stateDirExists: false },
        `${c.what}: the join stops with a clear message and writes nothing (${r.ms} ms)`,
      );
    }
    const csrs = (await cluster.clients.certificates.listCertificateSigningRequest()).items;
    t.same(
      csrs.map((c) => c.metadata?.name),
      [],
      'no CSR was created by a failed join',
    );
    await t.rejects(cluster.clients.core.readNode({ name: NODE }), { code: 404 }, 'no Node was registered');
  });

  const joinOnce = async (t: Test, label: string) => {
    const r = await runCli(['join', '--server', server, '--token', token, '--discovery-token-ca-cert-hash', hash, ...joinFlags]);
    t.match(
      { code: r.code, stdout: r.stdout },
      { code: 0, stdout: new RegExp(`joined the cluster as node ${NODE} \\(Ready`) },
      `${label}: join succeeds: ${r.stderr.slice(-2000)}`,
    );
    t.notMatch(
      r.stderr,
      /kubelet-serving certificate is not issued yet/,
      `${label}: the serving certificate was issued before join returned`,
    );
    t.comment(`${label}: join → Node Ready and serving certificate in ${r.ms} ms`);
    const node = await cluster.clients.core.readNode({ name: NODE });
    t.equal(condition(node, 'Ready'), 'True', `${label}: the Node is Ready`);
    return node;
  };

  await t.test('the joined node has certificates from the real CSR API, chained to the cluster CA', async (t) => {
    await joinOnce(t, 'first join');
    const pem = await readFile(join(stateDir, 'pki', 'kubelet-client-current.pem'), 'utf8');
    const { X509Certificate } = await import('node:crypto');
    const client = new X509Certificate(pem);
    t.match(
      { subject: client.subject, chains: signedBy(pem, caPem) },
      { subject: `O=system:nodes\nCN=system:node:${NODE}`, chains: true },
      'client certificate: node identity, issued by the cluster CA',
    );
    const serving = await poll(
      'serving certificate written',
      () => readFile(join(stateDir, 'pki', 'kubelet-serving.crt'), 'utf8'),
      (s) => s.length > 0,
    );
    t.ok(signedBy(serving, caPem), 'serving certificate issued by the cluster CA');
    const csrs = (await cluster.clients.certificates.listCertificateSigningRequest()).items.map(csrSummary);
    t.match(
      csrs.sort((a, b) => (a.signerName ?? '').localeCompare(b.signerName ?? '')),
      [
        {
          signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
          username: /^system:bootstrap:[a-z0-9]{6}$/,
          approved: 'AutoApproved',
          issued: true,
        },
        {
          signerName: 'kubernetes.io/kubelet-serving',
          username: `system:node:${NODE}`,
          approved: 'VkvmNodeServingCertApproved',
          issued: true,
        },
      ],
      'the client CSR was made under the bootstrap token and auto-approved by kube-controller-manager; the serving CSR by the node, approved by the vkvm controllers',
    );
    const kubeconfig = await readFile(join(stateDir, 'kubeconfig'), 'utf8');
    t.match(kubeconfig, /client-certificate: .*kubelet-client-current\.pem/, 'the node kubeconfig names the rotating PEM');
    // A renewal is the rotator's request made with the node's own certificate:
    // kube-controller-manager approves it through the selfnodeclient binding.
    const asNode = makeClients(loadKubeConfig(join(stateDir, 'kubeconfig')));
    // In a directory of its own (made 0700), as a node's pki directory is; parent must stay searchable for QEMU.
    const renewed = await obtainClientCertificate(asNode, {
      nodeName: NODE,
      pemPath: join(parent, 'renewal', 'renewed.pem'),
      issueTimeoutMs: 60_000,
    });
    const renewal = await cluster.clients.certificates.readCertificateSigningRequest({ name: renewed.csrName });
    t.match(
      { ...csrSummary(renewal), chains: signedBy(renewed.certPem, caPem) },
      {
        signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
        username: `system:node:${NODE}`,
        approved: 'AutoApproved',
        issued: true,
        chains: true,
      },
      'a renewal request made as the node is auto-approved and signed by the cluster CA',
    );
  });

  await t.test('another host joining under the name of a Ready node is refused and writes nothing', async (t) => {
    const otherState = join(parent, 'other-host');
    const flags = joinFlags.map((f) =>
      f.startsWith('--state-dir=')
        ? `--state-dir=${otherState}`
        : f.startsWith('--run-dir=')
          ? `--run-dir=${join(parent, 'other-run')}`
          : f,
    );
    const r = await runCli(['join', '--server', server, '--token', token, '--discovery-token-ca-cert-hash', hash, ...flags]);
    t.match(
      { code: r.code, stderr: r.stderr, written: existsSync(otherState) },
      { code: 1, stderr: new RegExp(`a Node named ${NODE} already exists and is Ready`), written: false },
    );
  });

  await t.test('a pod on the joined node runs and kubectl logs reaches it through the apiserver', async (t) => {
    // A joined node has no test guest (only `vkvm up` imports it): an operator copies the layout `vkvm up` wrote and loads
    // it with `vkvm images import` (docs/kubevirt.md#images). This host holds the guest cache, so its layout is imported here.
    await importTestGuest(join(stateDir, 'images'));
    await ns.createPod(testGuestPod({ name: 'guest', node: NODE, terminationGracePeriodSeconds: 5 }));
    const running = await waitFor(ns.pod('guest'), (p) => p.status?.phase === 'Running', { what: 'Running', deadlineMs: 240_000 });
    t.equal(running.spec?.nodeName, NODE, 'scheduled to the joined node');
    const logs = await poll(
      'boot marker in kubectl logs',
      () => ns.kubectl(['logs', 'guest']),
      (r) => r.stdout.includes(GUEST_BOOT_MARKER),
      {
        deadlineMs: 120_000,
        intervalMs: 1000,
      },
    );
    t.equal(logs.code, 0, 'kubectl logs through the apiserver succeeds against the joined node (its serving certificate verifies)');
  });

  await t.test('a KubeVirt VMI with a cloud-init Secret runs on the joined node under its node identity', async (t) => {
    // The agent reads the Secret and writes the VMI status as system:node:<name>: the Node
    // authorizer (through the launcher pod's volumes) and deploy/rbac.yaml must allow both.
    await cluster.clients.core.createNamespacedSecret({
      namespace: NS,
      body: { metadata: { name: 'smoke-user-data' }, stringData: { userdata: '#cloud-config\n' } },
    });
    const spec = smokeVmiSpec();
    spec.volumes = spec.volumes!.map((v) =>
      v.cloudInitNoCloud ? { name: v.name, cloudInitNoCloud: { secretRef: { name: 'smoke-user-data' } } } : v,
    );
    await kubevirtIn(ns).createVmi(vmiOf('smoke', spec));
    const vmi = await waitFor(ns.vmi('smoke'), (v) => v.status?.phase === 'Running', {
      what: 'Running on the joined node',
      deadlineMs: 240_000,
    });
    t.match(vmi.status, { phase: 'Running', nodeName: NODE }, 'the node wrote the VMI status');
  });

  await t.test('the approver denies a node a serving certificate for a name it does not own, or that no node may own', async (t) => {
    const { createKeyAndCsr } = await import('../../provider/certs/csr.js');
    const asNode = makeClients(loadKubeConfig(join(stateDir, 'kubeconfig')));
    const ask = async (name: string, dnsNames: string[], ipAddresses: string[]) => {
      const { csrPem } = await createKeyAndCsr({
        commonName: `system:node:${NODE}`,
        organizations: ['system:nodes'],
        dnsNames,
        ipAddresses,
      });
      await asNode.certificates.createCertificateSigningRequest({
        body: {
          metadata: { name },
          spec: {
            request: Buffer.from(csrPem).toString('base64'),
            signerName: 'kubernetes.io/kubelet-serving',
            usages: ['digital signature', 'server auth'],
          },
        },
      });
      return waitFor(csrs(cluster.clients, { name }), (c) => c.status?.conditions?.some((x) => x.type === 'Denied') ?? false, {
        what: 'Denied',
      });
    };
    const foreign = await ask('node-asks-foreign-name', ['evil.example'], []);
    t.match(
      foreign.status?.conditions,
      [{ type: 'Denied', reason: 'DNSNameNotAllowed', message: /dns:evil\.example/ }],
      'denied with the reason',
    );
    t.notOk(foreign.status?.certificate, 'no certificate issued');
    // Even once the node reports them as its own addresses (a node may write any), the API's names stay out of reach.
    const apiIP = (await cluster.clients.core.readNamespacedService({ name: 'kubernetes', namespace: 'default' })).spec!.clusterIP!;
    const own = (await cluster.clients.core.readNode({ name: NODE })).status!.addresses!;
    await asNode.core.patchNodeStatus(
      {
        name: NODE,
        body: {
          status: { addresses: [...own, { type: 'Hostname', address: 'kubernetes.default.svc' }, { type: 'InternalIP', address: apiIP }] },
        },
      },
      mergePatch,
    );
    const reserved = await ask('node-asks-api-names', ['kubernetes.default.svc'], [apiIP]);
    t.match(
      reserved.status?.conditions,
      [
        {
          type: 'Denied',
          reason: 'SANReserved',
          message: new RegExp(
            `dns:kubernetes\\.default\\.svc \\(an in-cluster service name\\), ip:${apiIP.replace(/\./g, '\\.')} \\(the kubernetes Service's cluster IP\\)`,
          ),
        },
      ],
      "the in-cluster API's name and IP are denied (SANReserved), whatever the Node reports",
    );
    await asNode.core.patchNodeStatus({ name: NODE, body: { status: { addresses: own } } }, mergePatch);
  });

  await t.test('vkvm reset stops the VMs, deletes the Node and the local state; a second join succeeds', async (t) => {
    const uid = (await ns.readPod('guest')).metadata!.uid!;
    const agentPid = Number(JSON.parse(await readFile(join(stateDir, 'agent.pid'), 'utf8')).pid);
    t.ok((await links()).has(bridge), 'before: the agent built its pod network bridge');
    const r = await runCli(['reset', `--state-dir=${stateDir}`, '--grace-period-s=5']);
    t.match(
      { code: r.code, stdout: r.stdout },
      { code: 0, stdout: /reset node vkvm-e2e-joined: 2 VM\(s\) stopped, Node deleted/ },
      `reset succeeds (${r.ms} ms): ${r.stderr.slice(-2000)}`,
    );
    await t.rejects(cluster.clients.core.readNode({ name: NODE }), { code: 404 }, 'the Node is gone');
    t.same(
      {
        bridge: (await links()).has(bridge),
        stateDir: existsSync(stateDir),
        qemu: qemuPids((argv) => argv.some((a) => a.includes(stateDir))).concat(qemuPidsOf(uid)),
        agentAlive: existsSync(`/proc/${agentPid}/cmdline`) && (await readFile(`/proc/${agentPid}/cmdline`, 'utf8')).includes(CLI),
      },
      { bridge: false, stateDir: false, qemu: [], agentAlive: false },
      'no bridge, no state, no QEMU, no agent',
    );
    const again = await runCli(['reset', `--state-dir=${stateDir}`]);
    t.match({ code: again.code, stdout: again.stdout }, { code: 0, stdout: /nothing to reset/ }, 'a second reset is a no-op');
    await cluster.clients.core.deleteNamespacedPod({ name: 'guest', namespace: NS, gracePeriodSeconds: 0 });

    // The second join runs while no approver does: the node still comes up Ready and runs pods; its
    // agent keeps asking, and serves its kubelet API once the returning controllers approve the CSR.
    await controllers.stop();
    const unapproved = await runCli(['join', '--server', server, '--token', token, '--discovery-token-ca-cert-hash', hash, ...joinFlags]);
    t.match(
      { code: unapproved.code, stdout: unapproved.stdout, stderr: unapproved.stderr },
      {
        code: 0,
        stdout: new RegExp(`joined the cluster as node ${NODE} \\(Ready`),
        stderr: /kubelet-serving certificate is not issued yet.*starts its kubelet API once the certificate is issued/s,
      },
      'without an approver the join succeeds, Ready, and warns that logs/exec wait for the serving certificate',
    );
    t.equal(
      condition(await cluster.clients.core.readNode({ name: NODE }), 'Ready'),
      'True',
      'the Node is Ready without a serving certificate',
    );
    t.notOk(await accepts(kubeletPort), 'no kubelet API without a serving certificate');
    const agentPidNow = async () => Number(JSON.parse(await readFile(join(stateDir, 'agent.pid'), 'utf8')).pid);
    const waitingAgent = await agentPidNow();
    controllers = runControllers();
    const serving = await poll(
      'the kubelet API serving once the approver is back',
      () => accepts(kubeletPort),
      (up) => up,
      { deadlineMs: 120_000 },
    ).catch(() => false);
    const newestServingCsr = (await cluster.clients.certificates.listCertificateSigningRequest()).items
      .filter((c) => c.spec.signerName === 'kubernetes.io/kubelet-serving' && c.spec.username === `system:node:${NODE}`)
      .sort((a, b) => (a.metadata?.creationTimestamp?.getTime() ?? 0) - (b.metadata?.creationTimestamp?.getTime() ?? 0))
      .at(-1);
    t.match(
      { serving, csr: newestServingCsr && csrSummary(newestServingCsr), agentPid: await agentPidNow() },
      { serving: true, csr: { approved: 'VkvmNodeServingCertApproved', issued: true }, agentPid: waitingAgent },
      'the approver approved the pending CSR and the agent started its kubelet API, without a restart',
    );
    const rejoin = await runCli(['join', '--server', server, '--token', token, '--discovery-token-ca-cert-hash', hash, ...joinFlags]);
    t.match(
      { code: rejoin.code, stdout: rejoin.stdout, certificateMissing: rejoin.stderr.includes('not issued yet') },
      { code: 0, stdout: /it had joined before, agent restarted/, certificateMissing: false },
      'a re-run join is idempotent: it keeps the credentials (the serving certificate too) and restarts the agent',
    );
  });
});
