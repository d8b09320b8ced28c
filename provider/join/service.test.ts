import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { pino } from 'pino';
import t from 'tap';
import { packageRoot } from '../package-root.js';
import { installSystemdService, removeSystemdService, renderAgentEnv } from './service.js';

t.test('deploy/vkvm.service passes systemd-analyze verify', async (t) => {
  const { stdout, stderr } = await promisify(execFile)('systemd-analyze', ['verify', join(packageRoot(), 'deploy', 'vkvm.service')]);
  t.same({ stdout, stderr }, { stdout: '', stderr: '' }, 'no warnings');
});

t.test('the unit environment carries node, CLI and the agent flags; whitespace in a flag is refused', async (t) => {
  t.equal(
    renderAgentEnv('/usr/bin/node', '/opt/vkvm/dist/provider/cli/main.js', [
      '--kubeconfig',
      '/var/lib/vkvm/kubeconfig',
      '--rotate-client-cert',
    ]),
    '# Written by vkvm join; read by /etc/systemd/system/vkvm.service.\nVKVM_NODE=/usr/bin/node\nVKVM_CLI=/opt/vkvm/dist/provider/cli/main.js\nVKVM_AGENT_ARGS="--kubeconfig /var/lib/vkvm/kubeconfig --rotate-client-cert"\n',
  );
  t.throws(() => renderAgentEnv('/n', '/c', ['--state-dir=/my dir']), { field: 'agent flags', message: /whitespace.*--no-systemd/ });
});

t.test('install writes the unit and its environment, then reloads, enables and restarts; remove undoes it', async (t) => {
  const dir = t.testdir({ etc: {} });
  const calls = join(dir, 'calls');
  // A systemctl that records its arguments.
  const systemctl = join(dir, 'systemctl');
  await writeFile(systemctl, `#!/bin/sh\necho "$*" >> ${calls}\n`);
  await chmod(systemctl, 0o755);
  const target = { unitPath: join(dir, 'vkvm.service'), envPath: join(dir, 'etc', 'vkvm', 'agent.env'), systemctl };
  const log = pino({ level: 'silent' });
  await installSystemdService(['--kubeconfig', '/var/lib/vkvm/kubeconfig'], log, target);
  t.same(
    {
      unit: await readFile(target.unitPath, 'utf8'),
      env: /^VKVM_AGENT_ARGS="--kubeconfig \/var\/lib\/vkvm\/kubeconfig"$/m.test(await readFile(target.envPath, 'utf8')),
      calls: (await readFile(calls, 'utf8')).trim().split('\n'),
    },
    {
      unit: await readFile(join(packageRoot(), 'deploy', 'vkvm.service'), 'utf8'),
      env: true,
      calls: ['daemon-reload', 'enable vkvm.service', 'restart vkvm.service'],
    },
  );
  await removeSystemdService(log, target);
  t.same(
    {
      unit: existsSync(target.unitPath),
      env: existsSync(target.envPath),
      calls: (await readFile(calls, 'utf8')).trim().split('\n').slice(3),
    },
    { unit: false, env: false, calls: ['disable --now vkvm.service', 'daemon-reload'] },
  );
});
