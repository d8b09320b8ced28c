// `vkvm up --nodes 2 --container-nodes 1` end to end: an ordinary node beside
// two vkvm nodes (one a simulated host), running Debian's containerd and runc and the real kubelet (TLS
// bootstrap, podCIDR from the controller manager), flannel host-gw as its
// network, and the local images (never pulled). A tenant's toolbox pod serves
// HTTP, a second fetches it by pod IP and serves what it got; both are read
// back by content. After Ctrl-C nothing of the node is left: no process,
// mount, cgroup, namespace, interface or state directory.
import { existsSync } from 'node:fs';
import { basename } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import t from 'tap';
import { TOOLBOX_IMAGE } from '../../provider/images/local-images.js';
import { run } from '../../provider/network/host.js';
import { hostFootprint, leftSince, type Footprint } from '../helpers/leftovers.js';
import { argvOf, pidsWhere } from '../helpers/processes.js';
import { condition, createTenant, isRunningAndReady, nodes, pods, startUpCluster, waitFor, type UpCluster } from './framework/index.js';

const NODE = 'vkvm-e2e-cnodes';
const NS = 'e2e-container-nodes';
const READY_DEADLINE_MS = 240_000;
const PAGE = 'served by the toolbox on a container node';

/** What a container node could leave: the leak audit's kinds plus links, routes, namespaces, mounts and its daemons. */
async function machineFootprint(up: { stateDir: string; bridge: string }): Promise<Footprint> {
  const {
    file: _files,
    'IPAM address': _leases,
    'DHCP lease': _dhcp,
    ...kinds
  } = await hostFootprint({
    stateDir: up.stateDir,
    runDir: '/run/vkvm',
    bridge: up.bridge,
  });
  const lines = async (argv: string[], keep: (l: string) => boolean) => (await run(argv)).split('\n').filter(keep).sort();
  return {
    ...kinds,
    link: await lines(['ip', '-o', 'link', 'show'], (l) => /vkvm|cni0|veth/.test(l)).then((ls) => ls.map((l) => l.split(':')[1]!.trim())),
    route: await lines(['ip', '-4', 'route', 'show'], Boolean),
    'network namespace (any)': await lines(['ip', 'netns', 'list'], Boolean).then((ls) => ls.map((l) => l.split(' ')[0]!)),
    mount: await lines(['cat', '/proc/self/mountinfo'], (l) => /containerd|kubelet|vkvm-cnode|\/run\/netns\/cni-/.test(l)),
    'container daemon': pidsWhere(isContainerNodeProcess).map((p) => argvOf(p).join(' ').slice(0, 120)),
  };
}

/** containerd, its shims, the kubelet, flanneld, and the pods' processes (pause, the toolbox's httpd). */
function isContainerNodeProcess(argv: string[]): boolean {
  const exe = basename(argv[0] ?? '');
  if (['containerd', 'containerd-shim-runc-v2', 'runc', 'pause', '/pause'].includes(exe)) return true;
  if (exe === 'vkvm-cluster') return argv[1] === 'kubelet' || argv[1] === 'flanneld';
  return exe === 'httpd' && argv.includes('/www');
}

/** A toolbox pod on `node` that runs `script`, Ready once its httpd answers on 8080. */
const toolboxPod = (name: string, node: string, script: string): V1Pod => ({
  metadata: { name, labels: { app: name } },
  spec: {
    nodeSelector: { 'kubernetes.io/hostname': node },
    terminationGracePeriodSeconds: 1,
    containers: [
      {
        name: 'toolbox',
        image: TOOLBOX_IMAGE,
        imagePullPolicy: 'Never',
        command: ['sh', '-c', script],
        readinessProbe: { httpGet: { path: '/', port: 8080 }, periodSeconds: 1 },
        volumeMounts: [{ name: 'www', mountPath: '/www' }],
      },
    ],
    volumes: [{ name: 'www', emptyDir: {} }],
  },
});

t.test(
  'vkvm up --nodes 2 --container-nodes 1: a kubelet node with containerd and flannel runs toolbox pods; nothing left after Ctrl-C',
  async (t) => {
    const before = await machineFootprint({ stateDir: '/nonexistent', bridge: 'vkn-none' });
    const up: UpCluster = await startUpCluster(t, { nodes: 2, containerNodes: 1, nodeName: NODE });
    const cnode = up.nodes.find((n) => n.container)!;
    const vkvmNode2 = up.nodes[1]!;
    const admin = up.clients;
    t.match(
      up.output.find((l) => l.startsWith('vkvm: node')),
      `vkvm: nodes ${NODE}, ${vkvmNode2.name}, ${cnode.name} are up`,
      'one line names all three nodes',
    );

    await t.test('the container node is Ready: the real kubelet on containerd, its podCIDR from the controller manager', async (t) => {
      await waitFor(nodes(admin, { name: vkvmNode2.name }), (n) => condition(n, 'Ready') === 'True', { what: 'Ready (vkvm node 2)' });
      const n = await waitFor(nodes(admin, { name: cnode.name }), (n) => condition(n, 'Ready') === 'True', {
        what: 'Ready',
        deadlineMs: READY_DEADLINE_MS,
      });
      t.match(
        {
          internalIP: n.status?.addresses?.find((a) => a.type === 'InternalIP')?.address,
          runtime: n.status?.nodeInfo?.containerRuntimeVersion,
          kubelet: n.status?.nodeInfo?.kubeletVersion,
          podCIDR: n.spec?.podCIDR,
          flannel: n.metadata?.annotations?.['flannel.alpha.coreos.com/backend-type'],
        },
        {
          internalIP: cnode.address,
          runtime: /^containerd:\/\/1\./,
          kubelet: 'v1.33.13',
          podCIDR: /^10\.244\.\d+\.0\/24$/,
          flannel: 'host-gw',
        },
      );
    });

    await t.test('a tenant’s toolbox pod serves HTTP; another fetches it by pod IP; both answer by content', async (t) => {
      await admin.core.createNamespace({ body: { metadata: { name: NS } } });
      const tenant = await createTenant(admin, NS);
      await tenant.core.createNamespacedPod({
        namespace: NS,
        body: toolboxPod('server', cnode.name, `echo '${PAGE}' > /www/index.html && exec httpd -f -p 8080 -h /www`),
      });
      const server = await waitFor(pods(admin, NS, { name: 'server' }), (p) => isRunningAndReady(p) && !!p.status?.podIP, {
        what: 'Running and Ready',
        deadlineMs: READY_DEADLINE_MS,
      });
      const serverIp = server.status!.podIP!;
      // The client serves what it fetched: Ready only once the fetch succeeded.
      await tenant.core.createNamespacedPod({
        namespace: NS,
        body: toolboxPod(
          'client',
          cnode.name,
          `until wget -q -O /www/index.html http://${serverIp}:8080/; do sleep 1; done; exec httpd -f -p 8080 -h /www`,
        ),
      });
      const client = await waitFor(pods(admin, NS, { name: 'client' }), (p) => isRunningAndReady(p) && !!p.status?.podIP, {
        what: 'Running and Ready',
        deadlineMs: READY_DEADLINE_MS,
      });
      const fetch = async (ip: string) => (await cnode.exec(['busybox', 'wget', '-q', '-O', '-', `http://${ip}:8080/`])).stdout.trim();
      t.same(
        { server: await fetch(serverIp), client: await fetch(client.status!.podIP!) },
        { server: PAGE, client: PAGE },
        'the server’s page, and the client’s copy of it fetched across the node’s pod network',
      );
      t.match(server.status?.containerStatuses?.[0]?.imageID, /^sha256:|@sha256:/, 'the image is the local one, imported');
    });

    await t.test('Ctrl-C stops the node; no process, mount, cgroup, namespace, link or node state is left', async (t) => {
      t.same(await up.interrupt(), [], 'vkvm up, its nodes and its control plane exit');
      t.notOk(existsSync(cnode.simulated!.rootDir), 'the container node’s state dir (containerd, kubelet) is gone');
      t.notOk(existsSync(cnode.simulated!.runDir), 'its run dir is gone');
      t.same(leftSince(before, await machineFootprint(up)), [], 'nothing of the node is left on the machine');
    });
  },
);
