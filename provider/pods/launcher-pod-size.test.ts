import t from 'tap';
import { launcherMemoryRequestMiB, launcherPodFor } from '../controllers/launcher-pod.js';
import type { VirtualMachineInstance } from '../kubevirt/types.js';
import { undersizedLauncherPod } from './launcher-pod-size.js';

const vmi = (memory: string): VirtualMachineInstance => ({
  metadata: { name: 'big', namespace: 'ns1', uid: 'vmi-uid' },
  spec: { domain: { memory: { guest: memory } } },
});

t.test('a launcher pod the VMI controller sized for the VMI is realized, for either accelerator', async (t) => {
  t.same(
    [
      undersizedLauncherPod(launcherPodFor(vmi('1Gi'), 'kvm'), vmi('1Gi')),
      undersizedLauncherPod(launcherPodFor(vmi('1Gi'), 'tcg'), vmi('1Gi')),
    ],
    [undefined, undefined],
    'the controller’s own pods pass',
  );
});

t.test('a launcher pod charged less than its VMI needs is refused at its memory request', async (t) => {
  const needed = launcherMemoryRequestMiB(vmi('64Gi'), 'kvm');
  const grown = undersizedLauncherPod(launcherPodFor(vmi('1Gi'), 'tcg'), vmi('64Gi'));
  t.match(
    grown?.causes,
    [
      {
        path: 'spec.containers[0].resources.requests.memory',
        reason: 'FieldValueInvalid',
        message: new RegExp(`requests \\d+Mi of memory, less than its VirtualMachineInstance big needs \\(${needed}Mi`),
      },
    ],
    'a VMI grown after its pod was sized is refused',
  );
  const forged = launcherPodFor(vmi('1Gi'), 'kvm');
  forged.spec!.containers[0]!.resources = { requests: { memory: '1Mi' } };
  t.match(undersizedLauncherPod(forged, vmi('1Gi'))?.causes, [{ message: /requests 1Mi of memory/ }], 'a 1Mi pod is refused');
  delete forged.spec!.containers[0]!.resources;
  t.match(
    undersizedLauncherPod(forged, vmi('1Gi'))?.causes,
    [{ message: /requests 0Mi of memory/ }],
    'a pod requesting nothing is refused',
  );
});
