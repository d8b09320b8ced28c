// A tenant (a ServiceAccount with `edit` in one namespace) gets its VM and
// nothing of the host: host files outside what the node operator allowed,
// node-local services by URL and memory it was not charged for are refused
// or withheld, naming the field, and nothing of an attempt stays on the node.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { installClusterManifests } from '../../provider/cli/up.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import type { KubeClients } from '../../provider/kube/client.js';
import {
  createTenant,
  pidsWhere,
  pods,
  qemuPidsOf,
  qemuPidsOfDomain,
  restartAgent,
  startAgent,
  startTestCluster,
  testGuestPod,
  testLog,
  testNamespace,
  virtualMachineInstances,
  waitFor,
  type AgentProcess,
  TEST_GUEST_IMAGE,
} from './framework/index.js';

const NODE = 'vkvm-e2e-tenant';
const NS = 'e2e-tenant';
const KV = { group: 'kubevirt.io', version: 'v1', namespace: NS };

/** A server on `host` that counts the requests it sees; `handler` answers them. */
async function serve(t: Test, host: string, handler: (res: ServerResponse) => void) {
  const seen: string[] = [];
  const server = createServer((req, res) => {
    seen.push(req.url ?? '');
    handler(res);
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return { base: `http://${host}:${(server.address() as AddressInfo).port}`, seen };
}

function vmPod(
  name: string,
  image: string,
  extra: { annotations?: Record<string, string>; memory?: { request: string; limit: string } } = {},
): V1Pod {
  const memory = extra.memory ?? { request: '128Mi', limit: '128Mi' };
  const pod = testGuestPod({
    name,
    node: NODE,
    image,
    restartPolicy: 'Never',
    ...(extra.annotations ? { annotations: extra.annotations } : {}),
    resources: { requests: { cpu: '100m', memory: memory.request }, limits: { memory: memory.limit } },
  });
  return { ...pod, metadata: { ...pod.metadata, namespace: NS } };
}

/** What is left on the node of a pod's VM: its directory, cgroups, launcher and QEMU processes. */
function leftovers(agent: AgentProcess, uid: string) {
  const cgroups = ['memory', 'cpu,cpuacct', 'pids', 'unified', ''].map((c) => join('/sys/fs/cgroup', c, 'vkvm', uid)).filter(existsSync);
  const launchers = pidsWhere((argv) => argv.some((a, i) => a === '--uid' && argv[i + 1] === uid));
  return { vmDir: existsSync(join(agent.stateDir, 'vms', uid)), cgroups, launchers, qemu: qemuPidsOf(uid) };
}

const NOTHING_LEFT = { vmDir: false, cgroups: [], launchers: [], qemu: [] };

t.test('a tenant gets its VM and nothing of the host', async (t) => {
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  await testNamespace(t, cluster, NS);
  const tenant: KubeClients = await createTenant(cluster.clients, NS);

  // The node operator's choices: one image directory, one hostDisk directory, loopback 127.0.0.2 allowed
  // as if it were a remote image server, and a 32 MiB download cap (which images in the store meet too: the test
  // guest's 14 MiB disk fits).
  const scratch = await mkdtemp(join(tmpdir(), 'vkvm-e2e-tenant-'));
  t.teardown(() => rm(scratch, { recursive: true, force: true }));
  await chmod(scratch, 0o755);
  const images = join(scratch, 'images');
  const disks = join(scratch, 'disks');
  const cache = join(scratch, 'cache');
  for (const d of [images, disks]) await mkdir(d, { mode: 0o755 });
  await writeFile(join(images, 'vmlinuz'), 'not a kernel');
  const operatorArgs = [
    `--host-image-dir=${images}`,
    `--image-cache-dir=${cache}`,
    '--image-download-allow=127.0.0.2/32',
    '--image-download-max-mib=32',
  ];
  let agent = await startAgent(t, cluster, { nodeName: NODE, extraArgs: operatorArgs });
  // Planted where a tenant may name files: links into what must stay private.
  await symlink(join(agent.stateDir, 'pki', 'kubelet-serving.key'), join(images, 'serving-key.qcow2'));
  await symlink('/dev/zero', join(images, 'sda.img'));

  const refused = async (name: string, pod: V1Pod, message: RegExp): Promise<void> => {
    await t.test(name, async (t) => {
      const created = await tenant.core.createNamespacedPod({ namespace: NS, body: pod });
      const uid = created.metadata!.uid!;
      // Watched as the tenant, as it would.
      const failed = await waitFor(pods(tenant, NS, { name: pod.metadata!.name! }), (p) => p.status?.phase === 'Failed', {
        what: 'Failed',
        deadlineMs: 90_000,
      });
      t.match(
        failed.status,
        { phase: 'Failed', reason: 'InvalidVMSpec', message },
        'refused as InvalidVMSpec, naming the field and the path',
      );
      t.same(leftovers(agent, uid), NOTHING_LEFT, 'nothing of the attempt is left on the node');
    });
  };

  const image = 'spec.containers\\[0\\]\\.image';
  await refused(
    '/etc/shadow as a disk',
    vmPod('shadow', '/etc/shadow'),
    new RegExp(`${image}: /etc/shadow: this node allows no|${image}: /etc/shadow is outside`),
  );
  await refused(
    'file:// of the admin kubeconfig',
    vmPod('kubeconfig', `file://${cluster.kubeconfigPath}`),
    new RegExp(`${image}: .*is outside the directories`),
  );
  await refused(
    "a symlink from an allowed directory to the node's serving key",
    vmPod('key-link', join(images, 'serving-key.qcow2')),
    new RegExp(`${image}: .*is outside the directories`),
  );
  await refused(
    'a device node through a symlink',
    vmPod('sda', join(images, 'sda.img')),
    new RegExp(`${image}: .*is outside the directories|not a regular file`),
  );
  await refused(
    'a ../ escape from an allowed directory',
    vmPod('escape', `${images}/../../etc/passwd`),
    new RegExp(`${image}: .*without ".." components`),
  );
  await refused('a kernel outside the lists', vmPod('kernel', 'kernel:/boot/../etc/shadow'), /spec\.containers\[0\]\.image: /);
  await refused(
    'an initrd naming the cluster CA key',
    vmPod('initrd', `kernel:${join(images, 'vmlinuz')}`, { annotations: { 'vkvm.io/initrd': join(cluster.stateDir, 'pki', 'ca.key') } }),
    /metadata\.annotations\[vkvm\.io\/initrd\]: .*is outside the directories/,
  );

  const nodeService = await serve(t, '127.0.0.1', (res) => res.end('node-local secret'));
  await refused(
    'a URL on the node',
    vmPod('loopback-url', `${nodeService.base}/disk.img`),
    new RegExp(`${image}: .*127\\.0\\.0\\.1 is the node's loopback`),
  );
  await refused(
    'the cloud metadata address',
    vmPod('metadata-url', 'http://169.254.169.254/latest/meta-data/iam'),
    new RegExp(`${image}: .*link-local`),
  );
  const apiserverIp = (await cluster.clients.core.readNamespacedService({ name: 'kubernetes', namespace: 'default' })).spec!.clusterIP!;
  await refused(
    "the apiserver's service IP",
    vmPod('service-url', `https://${apiserverIp}/disk.img`),
    new RegExp(`${image}: .*${apiserverIp.replace(/\./g, '\\.')} is in 10\\.96\\.0\\.0/12`),
  );
  const redirector = await serve(t, '127.0.0.2', (res) => res.writeHead(302, { location: `${nodeService.base}/disk.img` }).end());
  await refused(
    'a redirect from an allowed server to a loopback port',
    vmPod('redirect-url', `${redirector.base}/disk.img`),
    new RegExp(`${image}: .*127\\.0\\.0\\.1 is the node's loopback`),
  );
  const endless = await serve(t, '127.0.0.2', (res) => {
    res.writeHead(200);
    const chunk = Buffer.alloc(64 * 1024);
    const pump = (): void => {
      while (!res.destroyed && res.write(chunk));
      if (!res.destroyed) res.once('drain', pump);
    };
    pump();
  });
  await refused(
    'a URL streaming past the size cap',
    vmPod('endless-url', `${endless.base}/huge.img`),
    new RegExp(`${image}: .*larger than this node's 32 MiB cap`),
  );
  await t.test('the cap and refusals left no file in the image cache, and the node-local server heard nothing', async (t) => {
    t.same(
      { cache: existsSync(cache) ? readdirSync(cache) : [], nodeService: nodeService.seen, redirector: redirector.seen.length > 0 },
      { cache: [], nodeService: [], redirector: true },
    );
  });

  await t.test(
    "guest memory is the request the scheduler charged; two VMs' QEMUs are two uids that cannot open each other's disks, and see neither the other's files nor the state dir",
    async (t) => {
      const withSeed = { annotations: { 'vkvm.io/user-data': '#cloud-config\npassword: tenant-secret\n' } };
      await tenant.core.createNamespacedPod({
        namespace: NS,
        body: vmPod('small', TEST_GUEST_IMAGE, { ...withSeed, memory: { request: '64Mi', limit: '2Gi' } }),
      });
      await tenant.core.createNamespacedPod({ namespace: NS, body: vmPod('other', TEST_GUEST_IMAGE, withSeed) });
      const running = (name: string) =>
        waitFor(pods(tenant, NS, { name }), (p) => p.status?.phase === 'Running', { what: 'Running', deadlineMs: 180_000 });
      const [small, other] = await Promise.all([running('small'), running('other')]);
      const qemuOf = (pod: V1Pod) => {
        const [pid] = qemuPidsOf(pod.metadata!.uid!);
        const status = pid ? readFileSync(`/proc/${pid}/status`, 'utf8') : '';
        return {
          argv: pid ? readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0') : [],
          uid: Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]),
          gid: Number(/^Gid:\s+(\d+)/m.exec(status)?.[1]),
        };
      };
      const [a, b] = [qemuOf(small), qemuOf(other)];
      t.match(
        a.argv[a.argv.indexOf('-m') + 1],
        /^(size=65536k|64)\b/,
        'QEMU runs the small guest with 64 MiB, its request, not its 2 GiB limit',
      );
      t.ok(a.uid >= 3_000_000 && b.uid >= 3_000_000 && a.uid !== b.uid, `each QEMU runs as a uid of its own (${a.uid}, ${b.uid})`);
      // As the first VM's QEMU: open the second VM's cloud-init seed, which holds its secrets.
      const seedOfB = join(agent.stateDir, 'vms', other.metadata!.uid!, 'disks', 'cloudinit.iso');
      const attempt = spawnSync('cat', [seedOfB], { uid: a.uid, gid: a.gid, encoding: 'utf8' });
      t.match(
        { seedExists: existsSync(seedOfB), status: attempt.status, stderr: attempt.stderr },
        { seedExists: true, status: 1, stderr: /Permission denied/ },
        "another VM's QEMU cannot read it",
      );
      // As the first VM's QEMU would after an escape: its uid, in its mount namespace. What its uid alone could read on
      // the host (the agent's world-readable log in the state dir) is not even there; nor is another VM's directory.
      const [pidOfA] = qemuPidsOf(small.metadata!.uid!);
      const asQemuOfA = (cmd: string[], inItsView: boolean) =>
        spawnSync(
          'nsenter',
          [...(inItsView ? [`--mount=/proc/${pidOfA}/ns/mnt`] : []), '--setuid', String(a.uid), '--setgid', String(a.gid), '--', ...cmd],
          { encoding: 'utf8' },
        );
      const agentLog = join(agent.stateDir, 'agent.log');
      const host = asQemuOfA(['cat', agentLog], false);
      // World-readable files anyone on the node might leave where QEMU used to see them.
      const planted = [
        '/etc/vkvm-e2e-secret',
        `/tmp/vkvm-e2e-secret-${NS}`,
        '/var/lib/vkvm-e2e-secret',
        '/srv/vkvm-e2e-secret',
        '/opt/vkvm-e2e-secret',
      ];
      for (const f of planted) {
        await writeFile(f, 'host secret', { mode: 0o644 });
        t.teardown(() => rm(f, { force: true }));
      }
      const inView = {
        vms: asQemuOfA(['ls', '-A', join(agent.stateDir, 'vms')], true).stdout.trim(),
        agentLog: asQemuOfA(['cat', agentLog], true).stderr,
        seedOfB: asQemuOfA(['cat', seedOfB], true).stderr,
        pki: asQemuOfA(['ls', join(agent.stateDir, 'pki')], true).stderr,
        planted: planted.map((f) => asQemuOfA(['cat', f], true).stderr),
        root: asQemuOfA(['ls', '-A', '/'], true).stdout.split('\n').filter(Boolean).sort(),
        etc: asQemuOfA(['ls', '-A', '/etc'], true).stdout.split('\n').filter(Boolean).sort(),
      };
      const onHost = (dir: string, names: string[]) => names.filter((n) => existsSync(join(dir, n)));
      t.match(
        {
          hostReadsAgentLog: host.status === 0 && host.stdout.length > 0,
          hostReadsPlanted: planted.map((f) => readFileSync(f, 'utf8')),
          inView,
        },
        {
          hostReadsAgentLog: true,
          hostReadsPlanted: planted.map(() => 'host secret'),
          inView: {
            vms: small.metadata!.uid!,
            agentLog: /No such file or directory/,
            seedOfB: /No such file or directory/,
            pki: /No such file or directory/,
            planted: planted.map(() => /No such file or directory/),
          },
        },
        "in its own mount namespace QEMU sees its VM's directory and nothing else of the state dir, nor what the host keeps in /etc, /tmp, /var, /srv or /opt",
      );
      t.same(
        { root: inView.root, etc: inView.etc },
        {
          root: onHost('/', ['bin', 'dev', 'etc', 'lib', 'lib32', 'lib64', 'libx32', 'proc', 'run', 'sbin', 'sys', 'tmp', 'usr', 'var']),
          etc: ['libvirt', ...onHost('/etc', ['group', 'ld.so.cache', 'localtime', 'nsswitch.conf', 'passwd'])].sort(),
        },
        "QEMU's / holds only system software, devices and the directories it needs; its /etc only what libvirt and QEMU open",
      );
      for (const name of ['small', 'other'])
        await tenant.core.deleteNamespacedPod({ name, namespace: NS, body: { gracePeriodSeconds: 0 } });
    },
  );

  const hostDiskVmi = (name: string, path: string) => ({
    apiVersion: 'kubevirt.io/v1',
    kind: 'VirtualMachineInstance',
    metadata: { name, namespace: NS },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': NODE },
      domain: {
        resources: { requests: { memory: '128Mi' } },
        devices: {
          disks: [
            { name: 'root', disk: { bus: 'virtio' } },
            { name: 'data', disk: { bus: 'virtio' } },
          ],
        },
      },
      volumes: [
        { name: 'root', containerDisk: { image: TEST_GUEST_IMAGE } },
        { name: 'data', hostDisk: { path, type: 'DiskOrCreate', capacity: '16Mi' } },
      ],
    },
  });
  const hostDiskRefused = async (name: string, path: string, message: RegExp): Promise<void> => {
    await tenant.custom.createNamespacedCustomObject({ ...KV, plural: 'virtualmachineinstances', body: hostDiskVmi(name, path) });
    const vmi = await waitFor(
      virtualMachineInstances(tenant, NS, { name }),
      (v) => v.status?.conditions?.some((c) => c.type === 'Synchronized' && c.status === 'False') ?? false,
      {
        what: 'not synchronized',
        deadlineMs: 120_000,
      },
    );
    t.match(
      vmi.status?.conditions?.find((c) => c.type === 'Synchronized'),
      { status: 'False', message },
      'Synchronized False naming the field',
    );
    t.notOk(existsSync(path), 'no file was created');
    t.same(qemuPidsOfDomain(`${NS}_`), [], 'no QEMU');
  };
  // The controllers make the launcher pods; they run in this test process.
  const controllers = startControllers(cluster.clients, testLog, { retryPeriodMs: 500 });
  t.teardown(() => controllers.stop());
  await t.test('hostDisk is off unless the operator enables it', async () => {
    await hostDiskRefused('hostdisk-off', '/usr/sbin/vkvm-e2e-owned', /spec\.volumes\[1\]\.hostDisk\.path: .*allows no host disks/);
  });
  await t.test('with hostDisk enabled for one directory, a path outside it is refused', async () => {
    await agent.kill();
    agent = await restartAgent(t, cluster, agent, [...operatorArgs, `--host-disk-dir=${disks}`]);
    await hostDiskRefused(
      'hostdisk-outside',
      '/usr/sbin/vkvm-e2e-owned',
      /spec\.volumes\[1\]\.hostDisk\.path: .*is outside the directories/,
    );
  });
});
