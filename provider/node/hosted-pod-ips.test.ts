import t from 'tap';
import { movedPodIpsPatch } from './hosted-pod-ips.js';

t.test('the Node patch sets the hosted and lent addresses, or removes each annotation when none are left', async (t) => {
  t.same(movedPodIpsPatch({ hosted: { '10.244.1.7': '2026-11-27T10:00:00.000Z' }, lent: { '10.244.0.9': 'node-3' } }), {
    metadata: {
      annotations: {
        'vkvm.io/hosted-pod-ips': '{"10.244.1.7":"2026-11-27T10:00:00.000Z"}',
        'vkvm.io/lent-pod-ips': '{"10.244.0.9":"node-3"}',
      },
    },
  });
  t.same(movedPodIpsPatch({ hosted: {}, lent: {} }), {
    metadata: { annotations: { 'vkvm.io/hosted-pod-ips': null, 'vkvm.io/lent-pod-ips': null } },
  });
});
