import t from 'tap';
import { servingCsrPolicy } from './approver-flags.js';

t.test('approver flags: ranges repeat or take commas, the pattern must compile, defaults apply', async (t) => {
  t.same(
    servingCsrPolicy({ 'node-ip-ranges': ['192.0.2.0/24, 198.51.100.7/24', '2001:db8::/64'] }, () => ['10.0.0.0/8']),
    {
      nodeIpRanges: ['192.0.2.0/24', '198.51.100.0/24', '2001:db8::/64'],
    },
  );
  t.same(
    servingCsrPolicy({ 'node-dns-pattern': 'node-\\d+\\.example\\.com' }, () => ['10.0.0.0/8']),
    { nodeIpRanges: ['10.0.0.0/8'], dnsPattern: 'node-\\d+\\.example\\.com' },
  );
  t.throws(() => servingCsrPolicy({ 'node-ip-ranges': ['192.0.2.7'] }, () => []), {
    name: 'ConfigError',
    message: /--node-ip-ranges: "192\.0\.2\.7" is not a CIDR/,
  });
  t.throws(() => servingCsrPolicy({ 'node-dns-pattern': 'node-(' }, () => []), { name: 'ConfigError', message: /--node-dns-pattern: / });
});
