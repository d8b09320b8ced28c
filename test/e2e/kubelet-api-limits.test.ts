// Kubelet API limits on the real control plane: with a per-user cap of 5, a burst of 200 simultaneous attaches through
// kube-apiserver (WebSocket v5, as kubectl attaches) gets 5 sessions and 195
// refusals naming the limit, the agent keeps answering meanwhile, and the
// slots come back when the sessions end; with a 3 s idle timeout, an attach
// nobody types into is closed by the agent with a message saying why.
import { spawn } from 'node:child_process';
import t from 'tap';
import { WebSocket, type ClientOptions } from 'ws';
import type { KubeConfig } from '@kubernetes/client-node';
import { GUEST_BOOT_MARKER } from '../../vmm/guest/build.js';
import {
  isRunningAndReady,
  poll,
  restartAgent,
  startAgent,
  startTestCluster,
  testGuestPod,
  testNamespace,
  waitFor,
  type TestCluster,
} from './framework/index.js';

const NODE = 'vkvm-e2e-limits';
const NS = 'e2e-limits';
const POD = 'vm1';
const PER_USER = 5;
const ATTEMPTS = 200;
const BOOT_DEADLINE_MS = 180_000;
/** How long an attach attempt may go without being either refused or echoed (a guard, not a measurement). */
const ATTEMPT_DEADLINE_MS = 180_000;

const USER_LIMIT_MESSAGE = new RegExp(
  `^too many streaming sessions for user "[^"]+" on node ${NODE} \\(limit ${PER_USER}, --max-streaming-sessions-per-user\\)`,
);

interface AttachAttempt {
  /** held: the session is up (its own input came back from the console); refused: a status, then the end. */
  outcome: 'held' | 'refused' | 'failed';
  /** The status a refused attempt got, or what went wrong. */
  status?: { message?: string; reason?: string; code?: number };
  detail?: string;
  close(): Promise<void>;
}

/**
 * `kubectl attach -i` as kubectl 1.33 does it: a WebSocket (v5.channel.k8s.io)
 * to kube-apiserver, which turns it into a SPDY session with the node. Types a
 * line of its own and waits for it to come back, or for the session to end.
 */
async function attach(kc: KubeConfig, marker: string): Promise<AttachAttempt> {
  const server = kc.getCurrentCluster()!.server.replace(/^https:/, 'wss:');
  const options: ClientOptions = {};
  await kc.applyToHTTPSOptions(options);
  const ws = new WebSocket(
    `${server}/api/v1/namespaces/${NS}/pods/${POD}/attach?container=vm&stdin=true&stdout=true`,
    ['v5.channel.k8s.io', 'v4.channel.k8s.io'],
    options,
  );
  const closed = new Promise<void>((resolve) => ws.once('close', () => resolve()));
  const close = async () => {
    ws.close();
    await closed;
  };
  return new Promise((resolve) => {
    let stdout = '';
    let status = '';
    let settled = false;
    const settle = (attempt: Omit<AttachAttempt, 'close'>) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      resolve({ ...attempt, close });
    };
    const deadline = setTimeout(
      () => settle({ outcome: 'failed', detail: `neither refused nor echoed; output so far: ${stdout.slice(-200)}` }),
      ATTEMPT_DEADLINE_MS,
    );
    ws.on('open', () => ws.send(Buffer.concat([Buffer.of(0), Buffer.from(`echo ${marker}\n`)])));
    ws.on('message', (data: Buffer) => {
      if (data[0] === 1) stdout += data.subarray(1).toString();
      if (data[0] === 3) status += data.subarray(1).toString();
      if (stdout.includes(marker)) settle({ outcome: 'held' });
    });
    ws.on('close', (code) => {
      try {
        settle({ outcome: 'refused', status: JSON.parse(status) as AttachAttempt['status'] });
      } catch {
        settle({ outcome: 'failed', detail: `closed (${code}) with status ${JSON.stringify(status)}` });
      }
    });
    ws.on('error', (err) => settle({ outcome: 'failed', detail: err.message }));
  });
}

/** One sample of the agent's /metrics, read through kube-apiserver; 0 when the series does not exist. */
async function agentMetric(cluster: TestCluster, name: string, labels: Record<string, string>): Promise<number> {
  const res = await cluster.kubectl(['get', '--raw', `/api/v1/nodes/${NODE}/proxy/metrics`]);
  if (res.code !== 0) throw new Error(`metrics: ${res.stderr}`);
  for (const line of res.stdout.split('\n')) {
    const m = /^(\w+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (m?.[1] !== name) continue;
    const found = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map(([, k, v]) => [k, v]));
    if (Object.entries(labels).every(([k, v]) => found[k] === v)) return Number(m[3]);
  }
  return 0;
}

t.test('kubelet API limits on the real control plane', async (t) => {
  // Agents belong to this test, not to a subtest: a subtest's teardown would stop it.
  const root = t;
  const cluster = await startTestCluster(t);
  let agent = await startAgent(t, cluster, { nodeName: NODE, extraArgs: [`--max-streaming-sessions-per-user=${PER_USER}`] });
  const ns = await testNamespace(t, cluster, NS);
  const kubectl = ns.kubectl;
  await ns.createPod(testGuestPod({ name: POD, node: NODE }));
  await waitFor(ns.pod(POD), isRunningAndReady, { what: 'Running and Ready', deadlineMs: BOOT_DEADLINE_MS });
  await poll(
    'boot marker in kubectl logs',
    () => kubectl(['logs', POD]),
    (r) => r.stdout.includes(GUEST_BOOT_MARKER),
    { deadlineMs: 60_000 },
  );

  await t.test(
    `${ATTEMPTS} simultaneous attaches by one user: ${PER_USER} sessions, the rest refused naming the limit; the agent keeps answering`,
    async (t) => {
      const attempts = await Promise.all(Array.from({ length: ATTEMPTS }, (_, i) => attach(cluster.clients.kc, `limits-${i}-end`)));
      t.teardown(() => Promise.all(attempts.map((a) => a.close())));
      const held = attempts.filter((a) => a.outcome === 'held');
      const refused = attempts.filter((a) => a.outcome === 'refused');
      t.same(
        { held: held.length, refused: refused.length, failed: attempts.filter((a) => a.outcome === 'failed').map((a) => a.detail) },
        { held: PER_USER, refused: ATTEMPTS - PER_USER, failed: [] },
      );
      const unclear = refused.filter((a) => !USER_LIMIT_MESSAGE.test(a.status?.message ?? ''));
      t.same(
        unclear.map((a) => a.status),
        [],
        'every refusal names the per-user limit',
      );
      t.match(refused[0]?.status, { reason: 'TooManyRequests', code: 429 }, 'relayed as the 429 the agent answered');

      const logs = await kubectl(['logs', POD]);
      const healthz = await cluster.kubectl(['get', '--raw', `/api/v1/nodes/${NODE}/proxy/healthz`]);
      t.match(
        { logs: logs.code, boot: logs.stdout.includes(GUEST_BOOT_MARKER), healthz: healthz.stdout },
        { logs: 0, boot: true, healthz: 'ok' },
        'kubectl logs and healthz answer while the sessions are held',
      );
      const byKubectl = await kubectl(['attach', '-i', POD], { input: 'echo refused\n', timeoutMs: 60_000 });
      t.comment(`kubectl attach over the cap: ${byKubectl.stderr.trim()}`);
      t.match(
        { code: byKubectl.code, stderr: byKubectl.stderr },
        { code: 1, stderr: /too many streaming sessions for user "[^"]+" on node vkvm-e2e-limits \(limit 5/ },
        'kubectl attach shows the message',
      );
      const follow = await kubectl(['logs', '-f', POD], { timeoutMs: 60_000 });
      t.comment(`kubectl logs -f over the cap: ${follow.stderr.trim()}`);
      t.match(
        { code: follow.code, stderr: follow.stderr },
        { code: 1, stderr: /TooManyRequests/ },
        'a log follow counts against the same cap',
      );
      t.same(
        {
          open: await agentMetric(cluster, 'vkvm_streaming_sessions', { endpoint: 'attach' }),
          refusedAttach: await agentMetric(cluster, 'vkvm_streaming_sessions_refused_total', { limit: 'user', endpoint: 'attach' }),
          refusedLog: await agentMetric(cluster, 'vkvm_streaming_sessions_refused_total', { limit: 'user', endpoint: 'log' }),
        },
        { open: PER_USER, refusedAttach: ATTEMPTS - PER_USER + 1, refusedLog: 1 },
        'refusals are counted in the agent metrics',
      );

      await Promise.all(held.map((a) => a.close()));
      await poll(
        'the slots given back',
        () => agentMetric(cluster, 'vkvm_streaming_sessions', { endpoint: 'attach' }),
        (n) => n === 0,
      );
      const token = `after-${Math.floor(Math.random() * 1e9)}`;
      const again = await kubectl(['attach', '-i', POD], { input: `echo ${token}\n`, timeoutMs: 60_000 });
      t.match(
        { code: again.code, stdout: again.stdout },
        { code: 0, stdout: new RegExp(`^${token}\\r?$`, 'm') },
        'a new attach works once the sessions have ended',
      );
    },
  );

  await t.test('with a 3s idle timeout, an attach nobody types into is closed by the agent', async (t) => {
    await agent.kill('SIGKILL');
    agent = await restartAgent(root, cluster, agent, ['--streaming-connection-idle-timeout=3s']);
    // stdin stays open and silent: only the idle timeout can end this attach.
    const idle = spawn(cluster.binary, ['kubectl', `--kubeconfig=${cluster.kubeconfigPath}`, '-n', NS, 'attach', '-i', POD], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    t.teardown(() => void idle.kill('SIGKILL'));
    let stderr = '';
    idle.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    idle.stdout.resume();
    const code = await poll(
      'the idle attach to end',
      async () => idle.exitCode,
      (c) => c !== null,
      { deadlineMs: 120_000, intervalMs: 200 },
    );
    t.comment(`kubectl attach left idle: ${stderr.trim()}`);
    t.match(
      { code, stderr },
      { code: 1, stderr: /session closed after 3s without traffic \(--streaming-connection-idle-timeout\)/ },
      'kubectl says why',
    );
    t.ok(
      agent.output.some((l) => l.includes('"console session stopped"') && l.includes(`"pod":"${NS}/${POD}"`)),
      'the agent logged the closure with the pod',
    );
    const open = () => agentMetric(cluster, 'vkvm_streaming_sessions', { endpoint: 'attach' });
    t.equal(await poll('the slot given back', open, (n) => n === 0).catch(open), 0, 'the closed session gave its slot back');
  });
});
