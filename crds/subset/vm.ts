// The VirtualMachine spec: when its VMI runs (running / runStrategy) and the
// VMI it makes (template). The VM controller acts on the fields vkvm reads and
// reports the others it finds in a VM's spec.
import { PRESERVED, memoryGiven, memoryRequired } from './common.js';
import { RUN_STRATEGIES } from './constants.js';
import { boolean, enumOf, object, required, string, stringMap, unsupported } from './field.js';
import { vmiSpecField } from './vmi.js';

export const vmSpec = object(
  {
    /** Deprecated: true is runStrategy Always, false is Halted. Mutually exclusive with runStrategy. */
    running: boolean('Deprecated by KubeVirt in favour of runStrategy: true is Always, false is Halted.'),
    runStrategy: enumOf(RUN_STRATEGIES, 'When the VM should run. Absent (and no running) means Halted.'),
    // Typed so that the memory rule below can see it: KubeVirt takes the memory from it.
    instancetype: unsupported(object({ name: string(), kind: string() }, { preserveUnknown: true })),
    preference: unsupported(object({ name: string(), kind: string() }, { preserveUnknown: true })),
    template: required(
      object(
        {
          metadata: object(
            { labels: stringMap(), annotations: stringMap() },
            { preserveUnknown: true, description: 'Labels and annotations for the VMI.' },
          ),
          spec: required(vmiSpecField()),
        },
        { description: 'The VMI this VM runs.' },
      ),
    ),
  },
  {
    preserveUnknown: true,
    description: `Specification of the virtual machine. ${PRESERVED}`,
    rules: (at) => [
      {
        rule: '!(has(self.running) && has(self.runStrategy))',
        message: `${at}.running and ${at}.runStrategy are mutually exclusive`,
        fieldPath: '.running',
      },
      // KubeVirt accepts a VM whose instancetype supplies the memory, so vkvm does too: the VM
      // controller reports spec.instancetype as unsupported, and the VMI it makes is refused for its memory.
      memoryRequired(
        `${at}.template.spec`,
        `has(self.instancetype) || ${memoryGiven('self.template.spec')}`,
        '.template.spec.domain.resources.requests.memory',
      ),
    ],
  },
);
