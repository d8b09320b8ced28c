// PUT virtualmachines/NAME/migrate (virtctl migrate), as KubeVirt's
// MigrateVMRequestHandler answers it: the VM and its VMI must exist, the VMI
// must be Running (409 otherwise), then the VMIM kubevirt-migrate-vm-* is
// created by this server, labelled with the VMI's name (what virtctl
// migrate-cancel lists by), and the answer is 202. vkvm has no admission
// webhook, so the migration admission (controllers/migration/admission.ts)
// runs here first and a refusal is a 409 naming the reason; the migration
// controller checks it again when it accepts the VMIM.
import type { FastifyInstance } from 'fastify';
import { migrationRefusal, VMIM_VMI_LABEL } from '../../controllers/migration/admission.js';

import { isNotFound } from '../../kube/errors.js';
import type { KubevirtApi } from '../../kubevirt/client.js';
import { KUBEVIRT_API_VERSION, type VirtualMachineInstance } from '../../kubevirt/types.js';
import { conflict, fromApiError, notFound, StatusError } from '../errors.js';
import { dryRunSchema, isDryRun, NAMESPACED, nameParams, type NameParams } from './params.js';

interface MigrateBody {
  dryRun?: string[];
  /** KubeVirt ≥ 1.6: labels the target node must carry as well. */
  addedNodeSelector?: Record<string, string>;
}

const bodySchema = {
  type: 'object',
  properties: { dryRun: dryRunSchema, addedNodeSelector: { type: 'object', additionalProperties: { type: 'string' } } },
} as const;

export async function migrateRoutes(app: FastifyInstance, opts: { kubevirt: KubevirtApi }): Promise<void> {
  const { kubevirt } = opts;
  app.put<{ Params: NameParams; Body: MigrateBody }>(
    `${NAMESPACED}/virtualmachines/:name/migrate`,
    { schema: { params: nameParams, body: bodySchema }, config: { authorize: { resource: 'virtualmachines', subresource: 'migrate' } } },
    async (req, reply) => {
      const { namespace, name } = req.params;
      const body = req.body ?? {};
      await kubevirt.getVm(namespace, name).catch((err: unknown) => {
        throw fromApiError(err, 'virtualmachine', name);
      });
      const vmi: VirtualMachineInstance = await kubevirt.getVmi(namespace, name).catch((err: unknown) => {
        throw isNotFound(err) ? notFound('virtualmachineinstance', name) : fromApiError(err, 'virtualmachineinstance', name);
      });
      if (vmi.status?.phase !== 'Running') throw conflict('virtualmachine', name, 'VM is not running');
      const { items } = await kubevirt.listVmims(namespace).catch((err: unknown) => {
        throw new StatusError('InternalError', `Internal error occurred: listing migrations: ${(err as Error).message}`, undefined, {
          cause: err,
        });
      });
      const refusal = migrationRefusal(namespace, name, vmi, items);
      if (refusal) throw conflict('virtualmachine', name, refusal);
      const created = await kubevirt
        .createVmim(
          {
            apiVersion: KUBEVIRT_API_VERSION,
            kind: 'VirtualMachineInstanceMigration',
            metadata: { generateName: 'kubevirt-migrate-vm-', namespace, labels: { [VMIM_VMI_LABEL]: name } },
            spec: { vmiName: name, ...(body.addedNodeSelector ? { addedNodeSelector: body.addedNodeSelector } : {}) },
          },
          isDryRun(body.dryRun),
        )
        .catch((err: unknown) => {
          throw new StatusError('InternalError', `Internal error occurred: ${(err as Error).message}`, undefined, { cause: err });
        });
      req.log.info({ vm: `${namespace}/${name}`, migration: created.metadata?.name, dryRun: isDryRun(body.dryRun) }, 'migration requested');
      return reply.code(202).send();
    },
  );
}
