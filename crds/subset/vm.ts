// The VirtualMachine spec: when its VMI runs (running / runStrategy) and the
// VMI it makes (template). The VM controller acts on the fields vkvm reads and
// reports the others it finds in a VM's spec.
import { PRESERVED, memoryGiven, memoryRequired } from './common.js';
import { RUN_STRATEGIES } from './constants.js';
import { boolean, enumOf, list, notInCrd, object, opaque, required, string, stringMap, type TypeOf } from './field.js';
import type { dataVolumeSpec } from './datavolume.js';
import { matcher } from './instancetype.js';
import { vmiSpecField } from './vmi.js';

/**
 * What a VM with an instancetype may not set in its template, as KubeVirt's VM
 * admission refuses it (pkg/instancetype/apply: cpu.go, memory.go): every
 * instancetype sets the vCPUs and the memory, so these conflict whatever the
 * instancetype is. A matcher that infers from a volume is checked once
 * inferred (by the VM controller, as KubeVirt's mutating webhook clears the
 * memory that stood in for it first). [path under the template spec, CEL test on the domain `d` that it is set].
 */
const INSTANCETYPE_CONFLICTS: ReadonlyArray<readonly [string, (d: string) => string]> = [
  ...(['sockets', 'cores', 'threads'] as const).map(
    (f) => [`domain.cpu.${f}`, (d: string) => `has(${d}.cpu) && has(${d}.cpu.${f}) && ${d}.cpu.${f} != 0`] as const,
  ),
  ['domain.memory', (d) => `has(${d}.memory)`],
  ...(['requests', 'limits'] as const).flatMap((list) =>
    (['cpu', 'memory'] as const).map(
      (r) =>
        [
          `domain.resources.${list}.${r}`,
          (d: string) => `has(${d}.resources) && has(${d}.resources.${list}) && '${r}' in ${d}.resources.${list}`,
        ] as const,
    ),
  ),
];

export const vmSpec = object(
  {
    /** Deprecated: true is runStrategy Always, false is Halted. Mutually exclusive with runStrategy. */
    running: boolean('Deprecated by KubeVirt in favour of runStrategy: true is Always, false is Halted.'),
    runStrategy: enumOf(RUN_STRATEGIES, 'When the VM should run. Absent (and no running) means Halted.'),
    // Typed so that the memory rule below can see it: KubeVirt takes the memory from it.
    instancetype: matcher('instancetype'),
    preference: matcher('preference'),
    /**
     * DataVolumes the VM creates (named, in its namespace, owned by it) before its first VMI. Kept preserved in
     * the CRD: the DataVolume CRD checks each when the VM controller creates it, naming the field.
     */
    dataVolumeTemplates: notInCrd(
      list(
        object({
          metadata: required(object({ name: required(string()), labels: stringMap(), annotations: stringMap() })),
          spec: required(opaque<TypeOf<typeof dataVolumeSpec>>()),
        }),
      ),
    ),
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
      // The instancetype supplies the memory (the VM controller expands it into the VMI).
      memoryRequired(
        `${at}.template.spec`,
        `has(self.instancetype) || ${memoryGiven('self.template.spec')}`,
        '.template.spec.domain.resources.requests.memory',
      ),
      ...INSTANCETYPE_CONFLICTS.map(([field, set]) => ({
        rule: `!has(self.instancetype) || has(self.instancetype.inferFromVolume) || !(${set('self.template.spec.domain')})`,
        message: `VM field(s) ${at}.template.spec.${field} conflicts with selected instance type`,
        fieldPath: `.template.spec.${field}`,
      })),
    ],
  },
);
