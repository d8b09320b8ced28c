// PUT virtualmachineinstances/NAME/pause, /unpause and /softreboot; GET
// …/guestosinfo, /userlist and /filesystemlist. Pausing is the VMI's paused
// annotation, the desired state the node already applies (and re-applies
// after an agent restart). What the guest agent reports and the reboot are
// the node's to answer (vmi-node.ts), as virt-handler asks virt-launcher.
// The checks and messages are KubeVirt's.
import type { FastifyInstance } from 'fastify';
import type { KubevirtApi } from '../../kubevirt/client.js';
import { PAUSED_ANNOTATION, VMI_PLURAL, type VirtualMachineInstance } from '../../kubevirt/types.js';
import { findCondition } from '../../kubevirt/conditions.js';
import { conflict, fromApiError } from '../errors.js';
import type { VmiNodeClient } from '../vmi-node.js';
import { dryRunSchema, isDryRun, NAMESPACED, nameParams, type NameParams } from './params.js';

export interface VmiRoutesOptions {
  kubevirt: KubevirtApi;
  nodes: VmiNodeClient;
}

const VMI = `${NAMESPACED}/virtualmachineinstances/:name`;

/** Paused as KubeVirt's checks see it: the node reports it, or it was asked for and not yet applied. */
export const isPaused = (vmi: VirtualMachineInstance): boolean =>
  findCondition(vmi.status?.conditions, 'Paused') !== undefined || vmi.metadata.annotations?.[PAUSED_ANNOTATION] === 'true';

const running = (vmi: VirtualMachineInstance): boolean => vmi.status?.phase === 'Running';

export function checkPause(vmi: VirtualMachineInstance): void {
  const name = vmi.metadata.name!;
  if (!running(vmi)) throw conflict('virtualmachineinstance', name, 'VM is not running');
  if (isPaused(vmi)) throw conflict('virtualmachineinstance', name, 'VMI is already paused');
}

export function checkUnpause(vmi: VirtualMachineInstance): void {
  const name = vmi.metadata.name!;
  if (!running(vmi)) throw conflict('virtualmachineinstance', name, 'VMI is not running');
  if (!isPaused(vmi)) throw conflict('virtualmachineinstance', name, 'VMI is not paused');
}

/** The guest agent answers only while it is connected; KubeVirt refuses otherwise. */
export function checkAgent(vmi: VirtualMachineInstance): void {
  const name = vmi.metadata.name!;
  if (!running(vmi)) throw conflict('virtualmachineinstance', name, 'VMI is not running');
  if (findCondition(vmi.status?.conditions, 'AgentConnected')?.status !== 'True')
    throw conflict('virtualmachineinstance', name, 'VMI does not have guest agent connected');
}

/** virt-api's SoftRebootVMIRequestHandler checks: running, not paused, and an agent or ACPI to ask the guest by. */
export function checkSoftReboot(vmi: VirtualMachineInstance): void {
  const name = vmi.metadata.name!;
  if (!running(vmi)) throw conflict('virtualmachineinstance', name, 'VM is not running');
  if (findCondition(vmi.status?.conditions, 'Paused')?.status === 'True') throw conflict('virtualmachineinstance', name, 'VMI is paused');
  if (!findCondition(vmi.status?.conditions, 'AgentConnected') && vmi.spec.domain?.features?.acpi?.enabled === false) {
    throw conflict('virtualmachineinstance', name, 'VMI neither have the agent connected nor the ACPI feature enabled');
  }
}

export async function readVmi(kubevirt: KubevirtApi, { namespace, name }: NameParams): Promise<VirtualMachineInstance> {
  return kubevirt.getVmi(namespace, name).catch((err: unknown) => {
    throw fromApiError(err, 'virtualmachineinstance', name);
  });
}

const dryRunBody = { type: 'object', properties: { dryRun: dryRunSchema } } as const;

export async function vmiRoutes(app: FastifyInstance, opts: VmiRoutesOptions): Promise<void> {
  const { kubevirt } = opts;
  const setPaused = (verb: 'pause' | 'unpause', check: (vmi: VirtualMachineInstance) => void) =>
    app.put<{ Params: NameParams; Body: { dryRun?: string[] } | undefined }>(
      `${VMI}/${verb}`,
      {
        schema: { params: nameParams, body: dryRunBody },
        config: { authorize: { resource: 'virtualmachineinstances', subresource: verb } },
      },
      async (req, reply) => {
        const { namespace, name } = req.params;
        const vmi = await readVmi(kubevirt, req.params);
        check(vmi);
        // The UID precondition keeps the request on this VMI, not on a new one of the same name.
        const patch = { metadata: { uid: vmi.metadata.uid, annotations: { [PAUSED_ANNOTATION]: verb === 'pause' ? 'true' : null } } };
        await kubevirt.patch(VMI_PLURAL, namespace, name, patch, isDryRun(req.body?.dryRun)).catch((err: unknown) => {
          throw fromApiError(err, 'virtualmachineinstance', name);
        });
        app.log.info({ vmi: `${namespace}/${name}`, uid: vmi.metadata.uid, verb }, 'VMI pause state requested');
        return reply.code(200).send();
      },
    );
  setPaused('pause', checkPause);
  setPaused('unpause', checkUnpause);

  const nodeOf = (vmi: VirtualMachineInstance) => {
    const node = vmi.status?.nodeName;
    if (!node) throw conflict('virtualmachineinstance', vmi.metadata.name!, 'VMI is not running');
    return node;
  };
  for (const subresource of ['guestosinfo', 'userlist', 'filesystemlist'] as const) {
    app.get<{ Params: NameParams }>(
      `${VMI}/${subresource}`,
      { schema: { params: nameParams }, config: { authorize: { resource: 'virtualmachineinstances', subresource } } },
      async (req) => {
        const vmi = await readVmi(kubevirt, req.params);
        checkAgent(vmi);
        return opts.nodes.request({ ...req.params, node: nodeOf(vmi), subresource }, 'GET');
      },
    );
  }

  app.put<{ Params: NameParams }>(
    `${VMI}/softreboot`,
    { schema: { params: nameParams }, config: { authorize: { resource: 'virtualmachineinstances', subresource: 'softreboot' } } },
    async (req, reply) => {
      const vmi = await readVmi(kubevirt, req.params);
      checkSoftReboot(vmi);
      await opts.nodes.request({ ...req.params, node: nodeOf(vmi), subresource: 'softreboot' }, 'PUT');
      app.log.info(
        { vmi: `${req.params.namespace}/${req.params.name}`, uid: vmi.metadata.uid, user: req.user?.username },
        'guest reboot requested',
      );
      return reply.code(200).send();
    },
  );
}
