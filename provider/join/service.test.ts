import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { packageRoot } from '../package-root.js';
import { renderAgentEnv } from './service.js';

t.test('deploy/vkvm.service passes systemd-analyze verify', async (t) => {
  const { stdout, stderr } = await promisify(execFile)('systemd-analyze', ['verify', join(packageRoot(), 'deploy', 'vkvm.service')]);
  t.same({ stdout, stderr }, { stdout: '', stderr: '' }, 'no warnings');
});

t.test('the unit environment carries node, CLI and the agent flags; whitespace in a flag is refused', async (t) => {
  t.equal(
    renderAgentEnv('/usr/bin/node', '/opt/vkvm/dist/provider/cli/main.js', ['--kubeconfig', '/var/lib/vkvm/kubeconfig', '--rotate-client-cert']),
    '# Written by vkvm join; read by /etc/systemd/system/vkvm.service.\nVKVM_NODE=/usr/bin/node\nVKVM_CLI=/opt/vkvm/dist/provider/cli/main.js\nVKVM_AGENT_ARGS="--kubeconfig /var/lib/vkvm/kubeconfig --rotate-client-cert"\n',
  );
  t.throws(() => renderAgentEnv('/n', '/c', ['--state-dir=/my dir']), { field: 'agent flags', message: /whitespace.*--no-systemd/ });
});
