import t from 'tap';
import { agentArgsOf, joinCommand } from './join.js';

const HASH = `sha256:${'a'.repeat(64)}`;
const good = ['--server', 'https://10.0.0.1:6443', '--token', 'abcdef.0123456789abcdef', '--discovery-token-ca-cert-hash', HASH];
const without = (flag: string) => good.filter((_, i) => good[i] !== flag && good[i - 1] !== flag);

t.test('bad or missing join inputs fail before anything runs, naming the flag', async (t) => {
  const cases: Array<[string[], string, RegExp]> = [
    [without('--server'), '--server', /is required/],
    [[...without('--server'), '--server', 'http://10.0.0.1:6443'], '--server', /https:\/\//],
    [without('--token'), '--token', /is required/],
    [[...without('--token'), '--token', 'not-a-token'], '--token', /\[a-z0-9\]\{6\}/],
    [without('--discovery-token-ca-cert-hash'), '--discovery-token-ca-cert-hash', /is required/],
    [
      [...without('--discovery-token-ca-cert-hash'), '--discovery-token-ca-cert-hash', 'sha1:ab'],
      '--discovery-token-ca-cert-hash',
      /sha256:<64 hex digits>/,
    ],
    [[...good, '--kubeconfig', '/k'], '--kubeconfig', /writes the node kubeconfig itself/],
    [[...good, '--kubelet-port', '0'], '--kubelet-port', /integer/],
    [[...good, '--ready-timeout-s', 'soon'], '--ready-timeout-s', /positive integer/],
  ];
  for (const [argv, field, message] of cases) await t.rejects(joinCommand(argv), { field, message }, `${field}: ${argv.join(' ')}`);
});

t.test("agent flags given to join are passed to the agent; join's own are not", async (t) => {
  t.same(
    agentArgsOf({
      server: 'https://x',
      token: 't',
      'node-name': 'n1',
      label: ['a=b', 'c=d'],
      'no-default-taint': true,
      'no-systemd': true,
      'state-dir': '/s',
      'max-pods': undefined,
    }),
    ['--node-name=n1', '--label=a=b', '--label=c=d', '--no-default-taint'],
  );
});
