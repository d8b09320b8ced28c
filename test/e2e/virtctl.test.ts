// Issue 16 acceptance: KubeVirt's own virtctl (v1.5.1, built from the Go
// module proxy) against the real control plane, the subresource API
// registered with its aggregation layer, the controllers and a node agent
// booting the test guest. As a tenant with the `edit` role in one namespace:
// version, start, the error for an impossible start, console (a command
// through the guest's serial shell; a second session displaces the first),
// guestosinfo, pause/unpause, restart (a new VMI), stop, start --paused. A
// viewer gets 403 from start and console; no credentials at all get 401.
import { spawn, execFile } from 'node:child_process';
import { request } from 'node:https';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { KubeConfig, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { installClusterManifests } from '../../provider/cli/up.js';
import { isNotFound } from '../../provider/kube/errors.js';
import { makeClients } from '../../provider/kube/client.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import { defaultRouteAddress } from '../../provider/node/host-facts.js';
import { startSubresourceApi } from '../../provider/subresources/start.js';
import type { VirtualMachine, VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import { ensureVirtctl } from '../helpers/virtctl.js';
import { condition, createTenant, poll, smokeVmiSpec, startAgent, startTestCluster, testLog, testNamespace } from './framework/index.js';

const execFileP = promisify(execFile);
const NODE = 'vkvm-e2e-virtctl';
const NS = 'e2e-virtctl';
const KV = { group: 'kubevirt.io', version: 'v1', namespace: NS };
const BOOT_TIMEOUT_MS = 240_000;

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

t.test('virtctl drives VMs through the subresource API', async (t) => {
  const virtctlBin = await ensureVirtctl();
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const address = await defaultRouteAddress();
  if (!address) throw new Error('the host needs a default route: the apiserver dials the subresource API there');
  const api = await startSubresourceApi(cluster.clients, testLog, { address, port: 0 });
  t.teardown(() => api.close());
  const controllers = startControllers(cluster.clients, testLog, { retryPeriodMs: 500, onLeading: () => api.register() });
  t.teardown(() => controllers.stop());
  await startAgent(t, cluster, { nodeName: NODE });

  await testNamespace(t, cluster, NS);
  const tenant = await createTenant(cluster.clients, NS);
  const dir = t.testdir();
  const tenantConfig = join(dir, 'tenant.kubeconfig');
  await writeFile(tenantConfig, tenant.kc.exportConfig());
  const viewerConfig = join(dir, 'viewer.kubeconfig');
  await writeFile(viewerConfig, await viewerKubeconfig(cluster.clients.kc));

  const virtctl = async (args: string[], kubeconfig = tenantConfig): Promise<Run> => {
    try {
      const { stdout, stderr } = await execFileP(virtctlBin, [`--kubeconfig=${kubeconfig}`, `--namespace=${NS}`, ...args], {
        timeout: 60_000,
      });
      return { code: 0, stdout, stderr };
    } catch (err) {
      const e = err as { code?: number; stdout?: string; stderr?: string };
      return { code: e.code ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
    }
  };
  const custom = cluster.clients.custom;
  const readVm = async () =>
    (await custom.getNamespacedCustomObject({ ...KV, plural: 'virtualmachines', name: 'testvm' })) as VirtualMachine;
  const readVmi = async (): Promise<VirtualMachineInstance | undefined> =>
    (
      custom.getNamespacedCustomObject({ ...KV, plural: 'virtualmachineinstances', name: 'testvm' }) as Promise<VirtualMachineInstance>
    ).catch((err: unknown) => {
      if (isNotFound(err)) return undefined;
      throw err;
    });
  const state = async () => ({ vm: await readVm(), vmi: await readVmi() });
  type State = Awaited<ReturnType<typeof state>>;
  const waitFor = (what: string, read: () => Promise<State>, ok: (s: State) => boolean, opts: { timeoutMs: number }) =>
    poll(what, read, ok, { deadlineMs: opts.timeoutMs, intervalMs: 500 });
  const running = (what = 'VM Running, VMI Running') =>
    waitFor(what, state, (s) => s.vm.status?.printableStatus === 'Running' && s.vmi?.status?.phase === 'Running', {
      timeoutMs: BOOT_TIMEOUT_MS,
    });

  await poll(
    'APIService v1.subresources.kubevirt.io Available',
    () =>
      cluster.clients.objects.read({
        apiVersion: 'apiregistration.k8s.io/v1',
        kind: 'APIService',
        metadata: { name: 'v1.subresources.kubevirt.io' },
      }),
    (s) => condition(s as { status?: { conditions?: Array<{ type: string; status: string }> } }, 'Available') === 'True',
    { deadlineMs: 60_000 },
  );

  await t.test('virtctl version shows the server version', async (t) => {
    const r = await virtctl(['version']);
    t.match(r, { code: 0, stdout: /Server Version: version\.Info\{GitVersion:"v\d+\.\d+\.\d+"/ }, 'client and server versions printed');
  });

  await custom.createNamespacedCustomObject({
    ...KV,
    plural: 'virtualmachines',
    body: {
      apiVersion: 'kubevirt.io/v1',
      kind: 'VirtualMachine',
      metadata: { name: 'testvm', namespace: NS },
      spec: { runStrategy: 'Halted', template: { spec: smokeVmiSpec() } },
    },
  });

  await t.test('start runs a Halted VM; starting it again is refused as KubeVirt refuses it', async (t) => {
    t.match(await virtctl(['start', 'testvm']), { code: 0, stdout: /VM testvm was scheduled to start/ }, 'virtctl start accepted');
    const { vm } = await running();
    t.equal(vm.spec.runStrategy, 'Always', 'start set runStrategy Always');
    t.match(
      await virtctl(['start', 'testvm']),
      { code: 1, stderr: /Operation cannot be fulfilled on virtualmachine\.kubevirt\.io "testvm": VM is already running/ },
      'a running VM cannot start',
    );
    t.match(
      await virtctl(['start', 'nosuchvm']),
      { code: 1, stderr: /virtualmachine\.kubevirt\.io "nosuchvm" not found/ },
      'an unknown VM is 404',
    );
  });

  await t.test('console reaches the serial shell; a second session displaces the first', async (t) => {
    const first = openConsole(virtctlBin, tenantConfig);
    t.teardown(() => first.kill());
    await first.connected;
    const out = await first.run('echo $((6*7))vc', '42vc');
    t.match(out, /42vc/, 'the command ran in the guest and its output came back');
    const second = openConsole(virtctlBin, tenantConfig);
    t.teardown(() => second.kill());
    await second.connected;
    const ended = await first.exited;
    t.match(ended, { code: 0 }, 'the first session ended when the second connected');
    t.match(await second.run('echo $((7*6))again', '42again'), /42again/, 'the second session works');
    second.detach();
    t.match(await second.exited, { code: 0 }, 'Ctrl-] detaches');
  });

  await t.test('guestosinfo returns what the guest agent reports', async (t) => {
    await poll('AgentConnected', readVmi, (vmi) => condition(vmi ?? {}, 'AgentConnected') === 'True', { deadlineMs: BOOT_TIMEOUT_MS });
    const r = await virtctl(['guestosinfo', 'testvm']);
    t.equal(r.code, 0, `guestosinfo succeeded: ${r.stderr}`);
    t.match(JSON.parse(r.stdout), { os: { kernelRelease: /\S/ } }, 'the OS as the agent reports it');
  });

  await t.test('pause and unpause', async (t) => {
    t.match(await virtctl(['pause', 'vmi', 'testvm']), { code: 0, stdout: /VMI testvm was scheduled to pause/ }, 'pause accepted');
    await waitFor('VM Paused', state, (s) => s.vm.status?.printableStatus === 'Paused' && condition(s.vmi ?? {}, 'Paused') === 'True', {
      timeoutMs: 60_000,
    });
    t.match(await virtctl(['pause', 'vmi', 'testvm']), { code: 1, stderr: /VMI is already paused/ }, 'pausing twice is refused');
    t.match(await virtctl(['unpause', 'vmi', 'testvm']), { code: 0, stdout: /VMI testvm was scheduled to unpause/ }, 'unpause accepted');
    await waitFor(
      'VM Running again',
      state,
      (s) => s.vm.status?.printableStatus === 'Running' && condition(s.vmi ?? {}, 'Paused') === undefined,
      { timeoutMs: 60_000 },
    );
  });

  await t.test('restart replaces the VMI', async (t) => {
    const before = (await readVmi())!.metadata.uid;
    t.match(await virtctl(['restart', 'testvm']), { code: 0, stdout: /VM testvm was scheduled to restart/ }, 'restart accepted');
    const { vmi } = await waitFor(
      'a new VMI Running',
      state,
      (s) => s.vmi?.metadata.uid !== before && s.vmi?.status?.phase === 'Running' && s.vm.status?.printableStatus === 'Running',
      {
        timeoutMs: BOOT_TIMEOUT_MS,
      },
    );
    t.not(vmi!.metadata.uid, before, 'the VMI UID changed');
  });

  await t.test('stop halts the VM; start --paused starts it paused', async (t) => {
    t.match(await virtctl(['stop', 'testvm']), { code: 0, stdout: /VM testvm was scheduled to stop/ }, 'stop accepted');
    const stopped = await waitFor('VM Stopped, no VMI', state, (s) => s.vm.status?.printableStatus === 'Stopped' && !s.vmi, {
      timeoutMs: 120_000,
    });
    t.equal(stopped.vm.spec.runStrategy, 'Halted', 'stop set runStrategy Halted');
    t.match(await virtctl(['stop', 'testvm']), { code: 1, stderr: /VM is not running/ }, 'a stopped VM cannot stop');
    t.match(
      await virtctl(['restart', 'testvm']),
      { code: 1, stderr: /RunStategy Halted does not support manual restart requests/ },
      'a Halted VM cannot restart',
    );
    t.match(await virtctl(['start', 'testvm', '--paused']), { code: 0 }, 'start --paused accepted');
    const paused = await waitFor(
      'VMI Running and paused',
      state,
      (s) => s.vmi?.status?.phase === 'Running' && condition(s.vmi, 'Paused') === 'True' && s.vm.status?.printableStatus === 'Paused',
      {
        timeoutMs: BOOT_TIMEOUT_MS,
      },
    );
    t.equal(paused.vm.spec.runStrategy, 'Always', 'the controller set runStrategy Always');
  });

  await t.test('a viewer cannot start or attach; no credentials are 401', async (t) => {
    t.match(await virtctl(['start', 'testvm'], viewerConfig), { code: 1, stderr: /forbidden/i }, 'view cannot start');
    t.match(
      await virtctl(['console', 'testvm', '--timeout=1'], viewerConfig),
      { code: 1, stderr: /403|forbidden/i },
      'view cannot open the console',
    );
    const direct = await httpsStatus(
      `https://${address}:${api.port}/apis/subresources.kubevirt.io/v1/namespaces/${NS}/virtualmachines/testvm/start`,
      {},
    );
    t.equal(direct, 401, 'the subresource API itself: no front-proxy certificate is 401');
    const server = cluster.clients.kc.getCurrentCluster()!.server;
    const badToken = await httpsStatus(`${server}/apis/subresources.kubevirt.io/v1/namespaces/${NS}/virtualmachines/testvm/start`, {
      Authorization: 'Bearer not-a-token',
    });
    t.equal(badToken, 401, 'through the kube-apiserver: an invalid token is 401');
  });
});

/** A ServiceAccount bound to `view` in NS, as a kubeconfig. */
async function viewerKubeconfig(admin: KubeConfig): Promise<string> {
  const clients = makeClients(admin);
  await clients.core.createNamespacedServiceAccount({ namespace: NS, body: { metadata: { name: 'viewer' } } });
  await admin.makeApiClient(RbacAuthorizationV1Api).createNamespacedRoleBinding({
    namespace: NS,
    body: {
      metadata: { name: 'viewer-view' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'view' },
      subjects: [{ kind: 'ServiceAccount', name: 'viewer', namespace: NS }],
    },
  });
  const issued = await clients.core.createNamespacedServiceAccountToken({
    name: 'viewer',
    namespace: NS,
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  });
  const kc = new KubeConfig();
  const cluster = admin.getCurrentCluster()!;
  kc.loadFromOptions({
    clusters: [cluster],
    users: [{ name: 'viewer', token: issued.status!.token }],
    contexts: [{ name: 'viewer', cluster: cluster.name, user: 'viewer', namespace: NS }],
    currentContext: 'viewer',
  });
  return kc.exportConfig();
}

/** The status code of a PUT with an empty JSON body (server certificates not checked: only the code matters). */
function httpsStatus(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: 'PUT', headers: { ...headers, 'Content-Type': 'application/json' }, rejectUnauthorized: false },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on('error', reject);
    req.end('{}');
  });
}

interface ConsoleSession {
  connected: Promise<void>;
  /** Sends a line and resolves with the output once `expect` appears. */
  run(line: string, expect: string): Promise<string>;
  detach(): void;
  exited: Promise<{ code: number | null; stderr: string }>;
  kill(): void;
}

function openConsole(bin: string, kubeconfig: string): ConsoleSession {
  const child = spawn(bin, [`--kubeconfig=${kubeconfig}`, `--namespace=${NS}`, 'console', 'testvm'], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  const waiters: Array<() => void> = [];
  const poke = () => waiters.splice(0).forEach((w) => w());
  child.stdout.on('data', (d: Buffer) => ((stdout += d.toString()), poke()));
  child.stderr.on('data', (d: Buffer) => ((stderr += d.toString()), poke()));
  const exited = new Promise<{ code: number | null; stderr: string }>((resolve) =>
    child.on('exit', (code) => (poke(), resolve({ code, stderr }))),
  );
  const until = (what: string, ok: () => boolean, timeoutMs = 60_000) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(new Error(`console: no ${what} within ${timeoutMs} ms; stdout: ${JSON.stringify(stdout.slice(-500))}; stderr: ${stderr}`)),
        timeoutMs,
      );
      const check = () => {
        if (ok()) {
          clearTimeout(timer);
          resolve();
        } else if (child.exitCode !== null) {
          clearTimeout(timer);
          reject(new Error(`console exited (${child.exitCode}) before ${what}: ${stderr}`));
        } else waiters.push(check);
      };
      check();
    });
  return {
    connected: until('connection', () => stderr.includes('Successfully connected')),
    async run(line, expect) {
      const from = stdout.length;
      child.stdin.write(`${line}\n`);
      await until(expect, () => stdout.slice(from).includes(expect));
      return stdout.slice(from);
    },
    detach: () => child.stdin.write('\x1d'),
    exited,
    kill: () => {
      if (child.exitCode === null) child.kill('SIGKILL');
    },
  };
}
