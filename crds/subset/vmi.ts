// The VMI spec: the VirtualMachineInstance's `spec` and a VirtualMachine's
// `spec.template.spec`. One table for both, so the two cannot drift; only the
// field paths in the CEL messages differ.
import type { V1Affinity } from '@kubernetes/client-node';
import type { ValidationRule } from '../schema.js';
import { PRESERVED, memoryGiven, memoryRequired, name, uniqueNames } from './common.js';
import { EVICTION_STRATEGIES, MAX_DEVICES } from './constants.js';
import { domain } from './domain.js';
import {
  enumOf,
  integer,
  intOrString,
  list,
  notInCrd,
  object,
  opaque,
  reading,
  required,
  string,
  stringMap,
  unsupported,
} from './field.js';
import { volume } from './volumes.js';

export const network = object(
  {
    name: name('network; the interface of the same name uses it'),
    /** The pod network; the only source vkvm supports (KubeVirt defaults to it). */
    pod: object({ vmNetworkCIDR: unsupported(string()), vmIPv6NetworkCIDR: unsupported(string()) }, { preserveUnknown: true }),
  },
  { preserveUnknown: true, description: PRESERVED },
);

/** KubeVirt's Probe: readiness runs on the node (provider/pods/probes/); exec through the guest agent. */
/** A probe; a liveness probe's successThreshold must be 1, as a pod's must. */
const probe = (maxSuccessThreshold?: number) =>
  object({
    initialDelaySeconds: integer(undefined, { format: 'int32', minimum: 0 }),
    timeoutSeconds: integer(undefined, { format: 'int32', minimum: 1 }),
    periodSeconds: integer(undefined, { format: 'int32', minimum: 1 }),
    successThreshold: integer(undefined, { format: 'int32', minimum: 1, ...(maxSuccessThreshold ? { maximum: maxSuccessThreshold } : {}) }),
    failureThreshold: integer(undefined, { format: 'int32', minimum: 1 }),
    exec: object({ command: list(string()) }),
    httpGet: object({
      port: required(intOrString('Port on the VM to connect to.')),
      host: string(),
      path: string(),
      scheme: enumOf(['HTTP', 'HTTPS']),
      httpHeaders: list(object({ name: required(string()), value: required(string()) })),
    }),
    tcpSocket: object({ port: required(intOrString('Port on the VM to connect to.')), host: string() }),
    guestAgentPing: object({}),
  });

const toleration = object({
  key: string(),
  operator: string(),
  value: string(),
  effect: string(),
  tolerationSeconds: integer(undefined, { format: 'int64' }),
});

/** A VMI spec; `rules` (given the spec's field path) are added to the ones every VMI spec carries. */
export function vmiSpecField(rules: (at: string) => ValidationRule[] = () => []) {
  return object(
    {
      domain: required(domain),
      networks: list(network, { maxItems: MAX_DEVICES, rules: (at) => [uniqueNames(at, 'network')] }),
      volumes: list(volume, { maxItems: MAX_DEVICES, rules: (at) => [uniqueNames(at, 'volume')] }),
      // Scheduling: honoured by the scheduler through the launcher pod, not by the VM, so read whole.
      nodeSelector: stringMap(),
      affinity: reading(true, opaque<V1Affinity>('Pod affinity, as in a pod spec.')),
      tolerations: reading(true, list(toleration)),
      /** Seconds the guest gets to shut down before it is killed (KubeVirt default 30). */
      terminationGracePeriodSeconds: integer('Seconds the guest gets to shut down.', { format: 'int64', minimum: 0 }),
      readinessProbe: reading(true, probe()),
      /** A failing one kills the VM (the VMI fails; its VM's runStrategy says whether it comes back). */
      livenessProbe: reading(true, probe(1)),
      /** The guest's resolver, as a pod's: carried to the launcher pod, handed to the guest by DHCP (provider/pods/guest-dns.ts). */
      dnsPolicy: enumOf(['ClusterFirstWithHostNet', 'ClusterFirst', 'Default', 'None'], "DNS policy of the guest, as a pod's dnsPolicy."),
      dnsConfig: reading(
        true,
        object({
          nameservers: list(string(), { maxItems: 3 }),
          searches: list(string(), { maxItems: 32 }),
          options: list(object({ name: string(), value: string() })),
        }),
      ),
      /** What an eviction (a drain) does: migrate the VM away, evict it, or leave it to an external controller. */
      evictionStrategy: enumOf(
        EVICTION_STRATEGIES,
        'What an eviction of the VMI does: LiveMigrate, LiveMigrateIfPossible, None or External; default the cluster-wide setting.',
      ),
      /** The guest's hostname (cloud-init local-hostname); defaults to the VMI name. */
      hostname: notInCrd(string()),
      /** amd64 only in vkvm. */
      architecture: notInCrd(string()),
    },
    {
      preserveUnknown: true,
      description: `Specification of the virtual machine instance. ${PRESERVED}`,
      rules: (at) => [
        {
          rule:
            '!has(self.domain.devices) || !has(self.domain.devices.disks) || ' +
            'self.domain.devices.disks.all(d, has(self.volumes) && self.volumes.exists(v, v.name == d.name))',
          message: `${at}.domain.devices.disks: every disk must name a volume in ${at}.volumes`,
          fieldPath: '.domain.devices.disks',
        },
        {
          rule: "!has(self.dnsPolicy) || self.dnsPolicy != 'None' || (has(self.dnsConfig) && has(self.dnsConfig.nameservers) && size(self.dnsConfig.nameservers) > 0)",
          message: `${at}.dnsConfig.nameservers: must provide at least one DNS nameserver when dnsPolicy is None`,
          fieldPath: '.dnsConfig',
        },
        ...rules(at),
      ],
    },
  );
}

/** A VMI's own spec; a VM's template is checked by the VM's memory rule, which exempts an instancetype. */
export const vmiSpec = vmiSpecField((at) => [memoryRequired(at, memoryGiven('self'), '.domain.resources.requests.memory')]);
