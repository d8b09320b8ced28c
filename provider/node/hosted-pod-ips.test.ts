import t from 'tap';
import { hostedPodIpsPatch } from './hosted-pod-ips.js';

t.test('the Node patch sets the hosted addresses, or removes the annotation when none are left', async (t) => {
  t.same(hostedPodIpsPatch({ '10.244.1.7': '2026-11-27T10:00:00.000Z' }), {
    metadata: { annotations: { 'vkvm.io/hosted-pod-ips': '{"10.244.1.7":"2026-11-27T10:00:00.000Z"}' } },
  });
  t.same(hostedPodIpsPatch({}), { metadata: { annotations: { 'vkvm.io/hosted-pod-ips': null } } });
});
