// The README's quickstart as a new user runs it on a new machine: `npm start`
// with no flags (the default state dir, run dir, caches, bridge and ports),
// on a fresh host view (test/fresh-host/fresh-view.sh: nothing an earlier run
// left is there), then `kubectl apply` of the example pod, Ready, `kubectl
// logs` and `kubectl exec` reaching the guest, Ctrl-C, and nothing left.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import t from 'tap';
import { ensureClusterBinary } from '../../deploy/cluster/cluster.js';
import { links } from '../../provider/network/host.js';
import { DEFAULT_BRIDGE } from '../../provider/network/pod-network.js';
import { packageRoot } from '../../provider/package-root.js';
import { hostFootprint, leftSince, type AuditedAgent } from '../helpers/leftovers.js';
import { poll, runCommand, testLog, type CommandResult } from './framework/index.js';

const FRESH_VIEW = join(packageRoot(), 'test', 'fresh-host', 'fresh-view.sh');
const KUBECONFIG = '/var/lib/vkvm/kubeconfig';
// The defaults `vkvm up` runs with; the leak audit's marks of its processes and network.
const DEFAULTS: AuditedAgent = { stateDir: '/var/lib/vkvm', runDir: '/run/vkvm', bridge: DEFAULT_BRIDGE };

t.test('npm start with no flags on a fresh machine runs the quickstart pod; Ctrl-C leaves nothing', async (t) => {
  const kubectlBinary = await ensureClusterBinary(testLog);
  const before = await hostFootprint(DEFAULTS);
  // A foreground job of a terminal: its own process group, which Ctrl-C signals.
  const up = spawn('bash', [FRESH_VIEW, 'npm', 'start'], { cwd: packageRoot(), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  const output: string[] = [];
  let onLine = (): void => {};
  for (const s of [up.stdout, up.stderr])
    createInterface({ input: s }).on('line', (l) => {
      output.push(l);
      onLine();
    });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    up.once('exit', (code, signal) => resolve({ code, signal })),
  );
  t.teardown(() => {
    if (up.exitCode === null && up.signalCode === null) process.kill(-up.pid!, 'SIGKILL');
  });
  const upLine = await new Promise<string>((resolve, reject) => {
    onLine = () => {
      const found = output.find((l) => l.startsWith('vkvm: node '));
      if (found) resolve(found);
    };
    void exited.then((e) =>
      reject(new Error(`npm start exited (${JSON.stringify(e)}) before the node was up:\n${output.slice(-40).join('\n')}`)),
    );
  });
  t.match(upLine, `Use it with: export KUBECONFIG=${KUBECONFIG}`, 'one line says how to use it');

  // The user's terminal: in the view, where /var/lib/vkvm is the one npm start made.
  const viewPid = await viewProcess(up.pid!);
  const kubectl = (...args: string[]): Promise<CommandResult> =>
    runCommand('nsenter', [`--mount=/proc/${viewPid}/ns/mnt`, '--', kubectlBinary, 'kubectl', `--kubeconfig=${KUBECONFIG}`, ...args]);
  const applied = await kubectl('apply', '-f', join(packageRoot(), 'deploy', 'examples', 'test-guest-pod.yaml'));
  t.match(applied, { code: 0, stdout: 'pod/test-guest created' }, 'kubectl apply');
  const ready = await kubectl('wait', '--for=condition=Ready', 'pod/test-guest', '--timeout=300s');
  t.same({ code: ready.code, stdout: ready.stdout.trim() }, { code: 0, stdout: 'pod/test-guest condition met' }, 'the pod turns Ready');

  // The guest prints its user-data's greeting on its console once its cloud-init step ran.
  const logs = await poll(
    'the greeting on the console',
    () => kubectl('logs', 'test-guest'),
    (r) => r.stdout.includes('hello from user-data'),
    { deadlineMs: 120_000, intervalMs: 1000 },
  ).catch(() => kubectl('logs', 'test-guest'));
  t.match(logs, { code: 0, stdout: /hello from user-data on / }, 'kubectl logs reads the serial console');
  const exec = await kubectl('exec', 'test-guest', '--', '/bin/uname', '-s');
  t.same({ code: exec.code, stdout: exec.stdout }, { code: 0, stdout: 'Linux\n' }, 'kubectl exec runs in the guest');

  // A pod whose VM never starts: logs says why, as the kubelet's does, rather than "not found".
  const neverPulled = await kubectl(
    'run',
    'never-pulled',
    '--image=localhost/vkvm/missing:v1',
    '--image-pull-policy=Never',
    `--overrides=${JSON.stringify({ spec: { nodeSelector: { type: 'virtual-kubelet' }, tolerations: [{ key: 'virtual-kubelet.io/provider', operator: 'Exists' }] } })}`,
  );
  t.equal(neverPulled.code, 0, `kubectl run: ${neverPulled.stderr}`);
  await poll(
    'ErrImageNeverPull',
    () => kubectl('get', 'pod', 'never-pulled', '-o', 'jsonpath={.status.containerStatuses[0].state.waiting.reason}'),
    (r) => r.stdout === 'ErrImageNeverPull',
    { deadlineMs: 60_000 },
  );
  const refused = await kubectl('logs', 'never-pulled');
  t.same(
    { code: refused.code, stderr: refused.stderr.trim() },
    {
      code: 1,
      stderr: 'Error from server (BadRequest): container "never-pulled" in pod "never-pulled" is waiting to start: ErrImageNeverPull',
    },
    "kubectl logs of a VM that never started says why, in the kubelet's words",
  );

  process.kill(-up.pid!, 'SIGINT');
  const exit = await exited;
  // npm passes the Ctrl-C on as its own exit, as a shell shows it (130); vkvm's shows in its output.
  t.ok(exit.code === 0 || exit.signal === 'SIGINT', `Ctrl-C ends npm start (${JSON.stringify(exit)})`);
  t.same(
    { errors: output.filter((l) => l.startsWith('vkvm: ') && l !== upLine), stopping: output.some((l) => l.includes('"msg":"stopping"')) },
    { errors: [], stopping: true },
    'vkvm says it stops, and no error',
  );
  const left = leftSince(before, await hostFootprint(DEFAULTS));
  t.same(
    { left, bridge: (await links()).has(DEFAULTS.bridge) },
    { left: [], bridge: false },
    'no process, cgroup, network namespace, bridge, nftables or iptables rule left',
  );
});

/** A process of the job inside the fresh view (the view's shell execs npm), once it is there. */
async function viewProcess(jobPid: number): Promise<number> {
  const hostNs = await runCommand('readlink', ['/proc/self/ns/mnt']);
  for (let i = 0; i < 100; i++) {
    const pgrp = await runCommand('pgrep', ['-g', String(jobPid)]);
    for (const pid of pgrp.stdout.split('\n').filter(Boolean)) {
      const ns = await runCommand('readlink', [`/proc/${pid}/ns/mnt`]);
      if (ns.code === 0 && ns.stdout !== hostNs.stdout) return Number(pid);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no process of job ${jobPid} runs in its own mount namespace`);
}
