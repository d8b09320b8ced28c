// PUT virtualmachines/NAME/start, /stop and /restart: read the VM and its
// VMI, let vm-requests.ts decide, write the change (dry-run if asked) and
// answer 202 as KubeVirt does; the VM controller acts on it.
import type { FastifyInstance } from 'fastify';
import type { KubevirtApi } from '../../kubevirt/client.js';
import { VM_PLURAL, VMI_PLURAL, type VirtualMachineInstance } from '../../kubevirt/types.js';
import { isNotFound } from '../../kube/errors.js';
import type { KubeClients } from '../../kube/client.js';
import { CREATED_BY_LABEL, LAUNCHER_SELECTOR } from '../../controllers/launcher-pod.js';
import { fromApiError } from '../errors.js';
import { checkRestartOptions, restartChange, startChange, stopChange, type VmChange } from '../vm-requests.js';
import { dryRunSchema, isDryRun, NAMESPACED, nameParams, type NameParams } from './params.js';

export interface VmRoutesOptions {
  kubevirt: KubevirtApi;
  clients: KubeClients;
}

const VM = `${NAMESPACED}/virtualmachines/:name`;

interface StartBody {
  paused?: boolean;
  dryRun?: string[];
}
interface StopBody {
  gracePeriod?: number;
  dryRun?: string[];
}
interface RestartBody {
  gracePeriodSeconds?: number;
  dryRun?: string[];
}

const body = (properties: Record<string, unknown>) => ({ type: 'object', properties: { ...properties, dryRun: dryRunSchema } }) as const;

export async function vmRoutes(app: FastifyInstance, opts: VmRoutesOptions): Promise<void> {
  const { kubevirt } = opts;

  const read = async ({ namespace, name }: NameParams) => {
    const vm = await kubevirt.getVm(namespace, name).catch((err: unknown) => {
      throw fromApiError(err, 'virtualmachine', name);
    });
    // KubeVirt reads the VMI of the VM's name, whoever owns it.
    const vmi = await kubevirt.getVmi(namespace, name).catch((err: unknown): VirtualMachineInstance | undefined => {
      if (isNotFound(err)) return undefined;
      throw fromApiError(err, 'virtualmachineinstance', name);
    });
    return { vm, vmi };
  };

  const write = async ({ namespace, name }: NameParams, change: VmChange, dryRun: boolean) => {
    try {
      if (change.kind === 'spec') await kubevirt.patch(VM_PLURAL, namespace, name, change.patch, dryRun);
      else await kubevirt.jsonPatchStatus(VM_PLURAL, namespace, name, change.ops, dryRun);
    } catch (err) {
      throw fromApiError(err, 'virtualmachine', name);
    }
    app.log.info(
      { vm: `${namespace}/${name}`, change: change.kind === 'spec' ? change.patch : change.ops, dryRun },
      'VM state change requested',
    );
  };

  const route = <B>(verb: 'start' | 'stop' | 'restart', schema: object, handle: (p: NameParams, b: B, dryRun: boolean) => Promise<void>) =>
    app.put<{ Params: NameParams; Body: B & { dryRun?: string[] } }>(
      `${VM}/${verb}`,
      { schema: { params: nameParams, body: schema }, config: { authorize: { resource: 'virtualmachines', subresource: verb } } },
      async (req, reply) => {
        const b = (req.body ?? {}) as B & { dryRun?: string[] };
        await handle(req.params, b, isDryRun(b.dryRun));
        return reply.code(202).send();
      },
    );

  route<StartBody>('start', body({ paused: { type: 'boolean' } }), async (p, b, dryRun) => {
    const { vm, vmi } = await read(p);
    await write(p, startChange(vm, vmi, { paused: b.paused === true }), dryRun);
  });

  route<StopBody>('stop', body({ gracePeriod: { type: 'integer' } }), async (p, b, dryRun) => {
    const { vm, vmi } = await read(p);
    const change = stopChange(vm, vmi, b.gracePeriod !== undefined ? { gracePeriod: b.gracePeriod } : {});
    // A shorter grace period reaches the running VMI before the stop (what the launcher pod's deletion uses).
    if (b.gracePeriod !== undefined && vmi && vmi.status?.phase !== 'Succeeded' && vmi.status?.phase !== 'Failed') {
      await kubevirt
        .patch(VMI_PLURAL, p.namespace, p.name, { spec: { terminationGracePeriodSeconds: b.gracePeriod } }, dryRun)
        .catch((err: unknown) => {
          throw fromApiError(err, 'virtualmachineinstance', p.name);
        });
    }
    await write(p, change, dryRun);
  });

  route<RestartBody>('restart', body({ gracePeriodSeconds: { type: 'integer' } }), async (p, b, dryRun) => {
    checkRestartOptions(b);
    const { vm, vmi } = await read(p);
    await write(p, restartChange(vm, vmi), dryRun);
    // A forced restart (--force --grace-period=0) also deletes the running launcher pod at once, as KubeVirt does.
    if (b.gracePeriodSeconds === 0 && vmi && !dryRun) {
      const pods = await opts.clients.core.listNamespacedPod({
        namespace: p.namespace,
        labelSelector: `${LAUNCHER_SELECTOR},${CREATED_BY_LABEL}=${vmi.metadata.uid}`,
        fieldSelector: 'status.phase==Running',
      });
      for (const pod of pods.items) {
        await opts.clients.core
          .deleteNamespacedPod({ namespace: p.namespace, name: pod.metadata!.name!, gracePeriodSeconds: 1 })
          .catch((err: unknown) => {
            if (!isNotFound(err)) throw err;
          });
      }
    }
  });
}
