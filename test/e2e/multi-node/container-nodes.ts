// `vkvm up --nodes 2 --container-nodes 1` end to end: an ordinary node beside
// two vkvm nodes (one a simulated host), running Debian's containerd and runc and the real kubelet (TLS
// bootstrap, podCIDR from the controller manager), flannel host-gw as its
// network, and the local images (never pulled). A tenant's toolbox pod serves
// HTTP, a second fetches it by pod IP and serves what it got; both are read
// back by content. Then Services and cluster DNS (kube-proxy on every node,
// CoreDNS beside the control plane): a container pod fetches a VMI's page by
// the name of a Service selecting its labels; the VM on vkvm node 2 resolves
// kubernetes.default and a Service in another namespace, fetches through it,
// and reaches a container pod by pod IP, which sees the VM's pod IP. A
// tenant's DaemonSet tolerating every taint runs on the container node and on
// neither vkvm node (refused there, nothing pulled or made). After Ctrl-C
// nothing of the node is left: no process, mount, cgroup, namespace,
// interface, kube-proxy rule or state directory.
import { AppsV1Api, type V1DaemonSet, type V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../../../provider/kube/client.js';
import type { Test } from 'tap';
import { TOOLBOX_IMAGE } from '../../../provider/images/local-images.js';
import {
  condition,
  createTenant,
  daemonSets,
  eventsOf,
  isRunningAndReady,
  kubeconfigFile,
  nodes,
  poll,
  pods,
  serviceAccounts,
  smokeVmiSpec,
  virtualMachineInstances,
  vmTracesOn,
  waitFor,
  waitForAll,
  waitForGone,
  type UpCluster,
  type UpNode,
} from '../framework/index.js';

const NS = 'e2e-container-nodes';
const READY_DEADLINE_MS = 240_000;
const PAGE = 'served by the toolbox on a container node';
/** A namespace the tenant has no rights in, whose Service the VM finds by name. */
const OTHER_NS = 'e2e-container-nodes-far';
const ECHO_PAGE = 'the echo pod in another namespace';
const BOOT_DEADLINE_MS = 240_000;
const KV = { group: 'kubevirt.io', version: 'v1', namespace: NS, plural: 'virtualmachineinstances' };
/** busybox httpd runs CGI programs with the peer's address in REMOTE_ADDR. */
const REMOTE_ADDR_CGI =
  "mkdir -p /www/cgi-bin && echo '#!/bin/sh' >/www/cgi-bin/ip && " +
  `echo 'echo Content-Type: text/plain; echo; echo "$REMOTE_ADDR"' >>/www/cgi-bin/ip && chmod +x /www/cgi-bin/ip`;

/** What each node says about Services and DNS, for a failure's message. */
async function serviceDiagnostics(up: UpCluster, vmIp: string | undefined): Promise<string> {
  const [node1, node2, cnode] = [up.nodes[0]!, up.nodes[1]!, up.nodes.find((n) => n.container)!];
  const svc = `vm-web.${NS}.svc.cluster.local`;
  const probes: Array<[string, UpNode, string]> = [
    ['node 1 routes', node1, 'ip -4 route'],
    ['node 1 to the VM', node1, `timeout 8 busybox wget -q -O - http://${vmIp}/`],
    ['node 1 forward and postrouting', node1, 'iptables -S FORWARD; iptables -t nat -S POSTROUTING'],
    ['node 1 kube-proxy', node1, `tail -5 ${up.stateDir}/kube-proxy/kube-proxy.log`],
    ['node 1 nat', node1, 'iptables-save -t nat | grep -E "vm-web|kube-dns|KUBE-SERVICES" | head -12'],
    ['node 2 routes', node2, 'ip -4 route'],
    ['node 2 to the VM', node2, `timeout 8 busybox wget -q -O - http://${vmIp}/`],
    ['node 2 forwarding', node2, 'grep . /proc/sys/net/ipv4/conf/*/forwarding /proc/sys/net/ipv4/conf/*/rp_filter'],
    ['node 2 kube-proxy', node2, `tail -5 ${node2.simulated!.stateDir}/kube-proxy/kube-proxy.log`],
    ['node 2 filter', node2, 'iptables-save -t filter | head -40'],
    ['cnode routes', cnode, 'ip -4 route'],
    ['cnode kube-proxy', cnode, `tail -8 ${cnode.simulated!.rootDir}/logs/kube-proxy.log`],
    ['cnode nat', cnode, 'iptables-save -t nat | grep -E "vm-web|kube-dns" | head -12'],
    ['cnode DNS via ClusterIP', cnode, `busybox nslookup ${svc} 10.96.0.10`],
    ['cnode DNS direct', cnode, `busybox nslookup ${svc} ${node1.address}`],
    ['cnode to the VM', cnode, `timeout 10 busybox wget -q -O - http://${vmIp}/`],
    ['cnode pings', cnode, `busybox ping -c 2 -W 2 ${node2.address}; busybox ping -c 2 -W 2 ${vmIp}`],
    ['cnode filter', cnode, 'iptables-save -t filter | grep -v "^#"'],
    ['cnode to the Service', cnode, `timeout 10 busybox wget -q -O - http://${svc}/`],
  ];
  const out: string[] = [];
  for (const [what, node, script] of probes) {
    const r = await node.exec(['sh', '-c', script]).catch((err: unknown) => ({ code: -1, stdout: '', stderr: String(err) }));
    out.push(`--- ${what} (exit ${r.code})\n${r.stdout}${r.stderr}`);
  }
  const slices = await up.kubectl(['-n', NS, 'get', 'endpointslices,pods', '-o', 'wide']);
  out.push(`--- ${NS}\n${slices.stdout}${slices.stderr}`);
  const logs = await up.kubectl(['-n', NS, 'logs', 'fetcher', '--tail=5']);
  out.push(`--- fetcher's log\n${logs.stdout}${logs.stderr}`);
  for (const script of [
    'cat /etc/resolv.conf',
    `nslookup ${svc}`,
    `nslookup ${svc} ${node1.address}`,
    `timeout 8 wget -q -O - http://${vmIp}/`,
    `timeout 8 wget -q -O - http://${up.nodes[0]!.address}:1/ 2>&1 | head -2`,
  ]) {
    const r = await up.kubectl(['-n', NS, 'exec', 'fetcher', '--', 'sh', '-c', script]);
    out.push(`--- in fetcher: ${script} (exit ${r.code})\n${r.stdout}${r.stderr}`);
  }
  const launcher = await up.kubectl(['-n', NS, 'get', 'pods', '-l', 'vm.kubevirt.io/name=web', '-o', 'name']);
  const consoleLog = await up.kubectl(['-n', NS, 'logs', launcher.stdout.trim().split('\n')[0] ?? '', '--tail=15']);
  out.push(`--- the VM's console\n${consoleLog.stdout}${consoleLog.stderr}`);
  return out.join('\n');
}

/** An add-on as kube-proxy's and node-exporter's are written: every taint tolerated; on a container node it serves its node's name. */
const addonDaemonSet = (): V1DaemonSet => ({
  metadata: { name: 'addon' },
  spec: {
    selector: { matchLabels: { app: 'addon' } },
    template: {
      metadata: { labels: { app: 'addon' } },
      spec: {
        tolerations: [{ operator: 'Exists' }],
        terminationGracePeriodSeconds: 1,
        containers: [
          {
            name: 'addon',
            image: TOOLBOX_IMAGE,
            // The container node has it, so nothing is pulled there; on a vkvm node a pull would be allowed.
            imagePullPolicy: 'IfNotPresent',
            env: [{ name: 'NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } }],
            command: ['sh', '-c', 'mkdir -p /www && echo "addon on $NODE_NAME" > /www/index.html && exec httpd -f -p 8080 -h /www'],
            readinessProbe: { httpGet: { path: '/', port: 8080 }, periodSeconds: 1 },
          },
        ],
      },
    },
  },
});

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

export async function containerNodesSuite(t: Test, up: UpCluster): Promise<void> {
  const cnode = up.nodes.find((n) => n.container)!;
  const vkvmNode2 = up.nodes[1]!;
  const admin = up.clients;
  let tenant: KubeClients | undefined;
  t.match(
    up.output.find((l) => l.startsWith('vkvm: node')),
    `vkvm: nodes ${up.nodes[0]!.name}, ${vkvmNode2.name}, ${cnode.name} are up`,
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
    tenant = await createTenant(admin, NS);
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

  await t.test('Services and DNS join VMs and container pods across nodes, sources not NATed', async (t) => {
    if (!tenant) return t.fail('the tenant was not created');
    const tenantKubeconfig = await kubeconfigFile(t, tenant);
    // Another namespace (the admin's): a toolbox pod behind Service echo, which also says who asked.
    await admin.core.createNamespace({ body: { metadata: { name: OTHER_NS } } });
    await waitFor(serviceAccounts(admin, OTHER_NS, { name: 'default' }), () => true, { what: 'the default ServiceAccount' });
    await admin.core.createNamespacedPod({
      namespace: OTHER_NS,
      body: toolboxPod('echo', cnode.name, `echo '${ECHO_PAGE}' > /www/index.html && ${REMOTE_ADDR_CGI} && exec httpd -f -p 8080 -h /www`),
    });
    const echoService = await admin.core.createNamespacedService({
      namespace: OTHER_NS,
      body: {
        metadata: { name: 'echo' },
        spec: { type: 'NodePort', selector: { app: 'echo' }, ports: [{ port: 80, targetPort: 8080 }] },
      },
    });
    // The tenant's VMI on vkvm node 2 (the guest serves "vkvm-guest <its address>"), and a Service selecting its labels.
    const spec = smokeVmiSpec();
    spec.nodeSelector = { 'kubernetes.io/hostname': vkvmNode2.name };
    spec.domain.devices!.interfaces = [{ name: 'default', bridge: {} }];
    await tenant.custom.createNamespacedCustomObject({
      ...KV,
      body: { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', metadata: { name: 'web', labels: { app: 'vm-web' } }, spec },
    });
    await tenant.core.createNamespacedService({
      namespace: NS,
      body: { metadata: { name: 'vm-web' }, spec: { selector: { app: 'vm-web' }, ports: [{ port: 80 }] } },
    });
    // A toolbox pod on the container node serves what it fetched from the VM by the Service's name.
    await tenant.core.createNamespacedPod({
      namespace: NS,
      body: toolboxPod(
        'fetcher',
        cnode.name,
        'until wget -q -O /www/index.html http://vm-web/; do sleep 1; done; exec httpd -f -p 8080 -h /www',
      ),
    });
    await waitFor(virtualMachineInstances(admin, NS, { name: 'web' }), (v) => v.status?.phase === 'Running', {
      what: 'Running on vkvm node 2',
      deadlineMs: BOOT_DEADLINE_MS,
    });
    const launcher = await waitFor(pods(admin, NS, { labelSelector: 'vm.kubevirt.io/name=web' }), (p) => !!p.status?.podIP, {
      what: 'the launcher pod’s IP',
    });
    const vmIp = launcher.status!.podIP!;
    const fetcher = await waitFor(pods(admin, NS, { name: 'fetcher' }), (p) => isRunningAndReady(p) && !!p.status?.podIP, {
      what: 'the guest’s page fetched through Service vm-web',
      deadlineMs: BOOT_DEADLINE_MS,
    }).catch(async (err: unknown) => {
      t.comment(await serviceDiagnostics(up, vmIp));
      throw err;
    });
    const echo = await waitFor(pods(admin, OTHER_NS, { name: 'echo' }), (p) => isRunningAndReady(p) && !!p.status?.podIP, {
      what: 'Running and Ready',
    });
    t.same(
      {
        node: launcher.spec?.nodeName,
        fetched: (await cnode.exec(['busybox', 'wget', '-q', '-O', '-', `http://${fetcher.status!.podIP!}:8080/`])).stdout.trim(),
      },
      { node: vkvmNode2.name, fetched: `vkvm-guest ${vmIp}` },
      'the container pod fetched the guest’s page by the name of a Service that selects the VMI’s labels',
    );

    // In the guest: wget without -q says which address a name resolved to.
    const inGuest = (url: string) =>
      up.kubectl(['-n', NS, 'exec', launcher.metadata!.name!, '--', '/bin/timeout', '30', '/bin/wget', '-O', '-', url], tenantKubeconfig);
    const apiserver = await poll(
      'the VM to reach kubernetes.default',
      () => inGuest('http://kubernetes.default:443/'),
      (r) => r.stderr.includes('Connecting to kubernetes.default'),
      { deadlineMs: 120_000, intervalMs: 2000 },
    );
    const far = await poll(
      `the VM to fetch echo.${OTHER_NS}`,
      () => inGuest(`http://echo.${OTHER_NS}/`),
      (r) => r.stdout.includes(ECHO_PAGE),
      { deadlineMs: 120_000, intervalMs: 2000 },
    );
    const nodePort = echoService.spec!.ports![0]!.nodePort!;
    const viaNodePort = await poll(
      `the VM to fetch echo through its NodePort on the container node`,
      () => inGuest(`http://${cnode.address}:${nodePort}/`),
      (r) => r.stdout.includes(ECHO_PAGE),
      { deadlineMs: 120_000, intervalMs: 2000 },
    );
    const source = await poll(
      'the VM to reach the echo pod by its pod IP',
      () => inGuest(`http://${echo.status!.podIP!}:8080/cgi-bin/ip`),
      (r) => r.code === 0,
      { deadlineMs: 120_000, intervalMs: 2000 },
    );
    t.match(
      {
        kubernetesDefault: apiserver.stderr,
        // The API server speaks TLS: a plain request is answered 400, which is an answer from it.
        apiserverAnswer: apiserver.stderr,
        farService: far.stderr,
        farPage: far.stdout.trim(),
        nodePortPage: viaNodePort.stdout.trim(),
        echoSawSource: source.stdout.trim(),
      },
      {
        kubernetesDefault: /Connecting to kubernetes\.default:443 \(10\.96\.0\.1:443\)/,
        apiserverAnswer: /400 Bad Request/,
        farService: new RegExp(`Connecting to echo\\.${OTHER_NS} \\(${echoService.spec!.clusterIP!.replaceAll('.', '\\.')}:80\\)`),
        farPage: ECHO_PAGE,
        nodePortPage: ECHO_PAGE,
        echoSawSource: vmIp,
      },
      'the VM on node 2 resolves kubernetes.default and a Service in another namespace, fetches through it and through its NodePort, and reaches a container pod by pod IP as itself',
    );
  });

  await t.test('a DaemonSet tolerating every taint runs on the container node; on the vkvm nodes no VM, no pull, and why', async (t) => {
    if (!tenant) return t.fail('the tenant was not created');
    const vkvmNodes = up.nodes.filter((n) => !n.container);
    const apps = tenant.kc.makeApiClient(AppsV1Api);
    await apps.createNamespacedDaemonSet({ namespace: NS, body: addonDaemonSet() });
    const onNode = (node: UpNode) => pods(tenant!, NS, { labelSelector: 'app=addon', fieldSelector: `spec.nodeName=${node.name}` });
    // The first refused pod on each vkvm node: the DaemonSet controller deletes it and, backing off, makes another.
    const [served, ...refused] = await Promise.all([
      waitFor(onNode(cnode), (p) => isRunningAndReady(p) && !!p.status?.podIP, {
        what: 'Running and Ready on the container node',
        deadlineMs: READY_DEADLINE_MS,
      }),
      ...vkvmNodes.map((n) => waitFor(onNode(n), (p) => p.status?.phase === 'Failed', { what: `Failed on ${n.name}` })),
    ]);
    for (const [i, pod] of refused.entries()) {
      const uid = pod.metadata!.uid!;
      const events = await waitForAll(eventsOf(tenant, NS, uid), (es) => es.some((e) => e.reason === 'NotAVirtualMachine'), {
        what: 'the NotAVirtualMachine event',
      });
      t.match(
        { phase: pod.status?.phase, reason: pod.status?.reason, message: pod.status?.message },
        {
          phase: 'Failed',
          reason: 'NotAVirtualMachine',
          message: /^Pod was rejected: a pod of DaemonSet addon reaches this vkvm node only by tolerating every taint; /,
        },
        `on ${vkvmNodes[i]!.name} the pod says why it is not run`,
      );
      t.same(
        {
          // The scheduler's "Scheduled" aside: the node's own, one event and no Pulling, Pulled, Created or Started.
          events: events.filter((e) => e.reason !== 'Scheduled').map((e) => `${e.type} ${e.reason} x${e.count ?? 1}`),
          made: await vmTracesOn(up, vkvmNodes[i]!, uid),
        },
        { events: ['Warning NotAVirtualMachine x1'], made: { processes: [], vmDir: false, netns: false } },
        `on ${vkvmNodes[i]!.name}: one event, nothing pulled, no launcher, QEMU, VM directory or network namespace`,
      );
    }
    const ds = await waitFor(
      daemonSets(tenant, NS, { name: 'addon' }),
      (d) => d.status?.observedGeneration === d.metadata?.generation && d.status?.numberAvailable === 1,
      { what: 'one pod available' },
    );
    t.comment(`the DaemonSet's status: ${JSON.stringify(ds.status)}`);
    t.match(
      {
        page: (await cnode.exec(['busybox', 'wget', '-q', '-O', '-', `http://${served.status!.podIP!}:8080/`])).stdout.trim(),
        status: ds.status,
      },
      {
        page: `addon on ${cnode.name}`,
        status: { desiredNumberScheduled: 3, numberMisscheduled: 0, numberReady: 1, numberAvailable: 1, numberUnavailable: 2 },
      },
      'the container node’s kubelet runs it and it answers; the DaemonSet counts three nodes, one pod available',
    );
    // Every pod made on a vkvm node so far, the controller's retries included.
    const onVkvmNodes = (await tenant.core.listNamespacedEvent({ namespace: NS })).items.filter(
      (e) =>
        e.involvedObject.kind === 'Pod' && e.involvedObject.name?.startsWith('addon-') && e.involvedObject.uid !== served.metadata!.uid,
    );
    t.same(
      onVkvmNodes
        .filter((e) => /^(Pulling|Pulled|ErrImagePull|Created|Started)$/.test(e.reason ?? ''))
        .map((e) => `${e.involvedObject.name} ${e.reason}`),
      [],
      `no pull and no start for any of the ${new Set(onVkvmNodes.map((e) => e.involvedObject.uid)).size} pods made on vkvm nodes`,
    );

    await apps.deleteNamespacedDaemonSet({ namespace: NS, name: 'addon' });
    await waitForGone(pods(admin, NS, { labelSelector: 'app=addon' }), { deadlineMs: 120_000 });
  });
}
