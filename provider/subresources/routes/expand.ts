// GET virtualmachines/NAME/expand-spec and PUT expand-vm-spec (virtctl
// expand): the VM with its instance type and preference expanded into its
// template and its matchers and status refs removed, as KubeVirt's
// ExpandSpecRequestHandler answers (a stored VM from its ControllerRevisions,
// a sent one from the objects in its namespace). A VM that names neither is
// its own expansion. What refuses the expansion is an error naming the field
// (KubeVirt's codes: 500 for a stored VM, 400 for one sent).
import type { FastifyInstance } from 'fastify';
import { InstancetypeRefusal, type Instancetypes } from '../../controllers/instancetypes.js';
import type { KubevirtApi } from '../../kubevirt/client.js';
import { KUBEVIRT_API_VERSION, type VirtualMachine } from '../../kubevirt/types.js';
import { badRequest, fromApiError, StatusError } from '../errors.js';
import { NAMESPACED, nameParams, type NameParams } from './params.js';

export interface ExpandRoutesOptions {
  kubevirt: KubevirtApi;
  instancetypes: Pick<Instancetypes, 'expand'>;
}

/** The VM expanded, or the message of what refuses it. */
async function expandVm(instancetypes: ExpandRoutesOptions['instancetypes'], vm: VirtualMachine): Promise<VirtualMachine | string> {
  if (!vm.spec.instancetype && !vm.spec.preference) return vm;
  try {
    const expanded = await instancetypes.expand(vm);
    if (!expanded.ok) return `${expanded.field}: ${expanded.message}`;
    const { instancetype: _i, preference: _p, ...spec } = vm.spec;
    const { instancetypeRef: _ir, preferenceRef: _pr, ...status } = vm.status ?? {};
    return { ...vm, spec: { ...spec, template: expanded.template }, ...(vm.status ? { status } : {}) };
  } catch (err) {
    if (err instanceof InstancetypeRefusal) return err.message;
    throw err;
  }
}

/** What KubeVirt's schema check would refuse first in a sent VM; undefined when it has the shape of one. */
export function invalidVm(body: unknown): string | undefined {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return 'the body is not an object';
  const vm = body as { kind?: unknown; spec?: { template?: unknown } };
  if (vm.kind !== undefined && vm.kind !== 'VirtualMachine') return `kind: Unsupported value: ${JSON.stringify(vm.kind)}`;
  if (typeof vm.spec !== 'object' || vm.spec === null) return 'spec: Required value';
  if (typeof vm.spec.template !== 'object' || vm.spec.template === null) return 'spec.template: Required value';
  return undefined;
}

export async function expandRoutes(app: FastifyInstance, opts: ExpandRoutesOptions): Promise<void> {
  app.get<{ Params: NameParams }>(
    `${NAMESPACED}/virtualmachines/:name/expand-spec`,
    { schema: { params: nameParams }, config: { authorize: { resource: 'virtualmachines', subresource: 'expand-spec' } } },
    async (req) => {
      const vm = await opts.kubevirt.getVm(req.params.namespace, req.params.name).catch((err: unknown) => {
        throw fromApiError(err, 'virtualmachine', req.params.name);
      });
      const expanded = await expandVm(opts.instancetypes, vm);
      if (typeof expanded === 'string') throw new StatusError('InternalError', `Internal error occurred: ${expanded}`);
      return expanded;
    },
  );

  app.put<{ Params: { namespace: string }; Body: unknown }>(
    `${NAMESPACED}/expand-vm-spec`,
    {
      schema: { params: { type: 'object', properties: { namespace: { type: 'string', minLength: 1 } }, required: ['namespace'] } },
      config: { authorize: { resource: 'expand-vm-spec' } },
    },
    async (req) => {
      const invalid = invalidVm(req.body);
      if (invalid) throw badRequest(`Object is not a valid VirtualMachine: ${invalid}`);
      const vm = req.body as VirtualMachine;
      const { namespace } = req.params;
      if (vm.metadata?.namespace && vm.metadata.namespace !== namespace) throw badRequest(`VM namespace must be empty or ${namespace}`);
      const sent: VirtualMachine = {
        ...vm,
        apiVersion: KUBEVIRT_API_VERSION,
        kind: 'VirtualMachine',
        metadata: { ...(vm.metadata ?? {}), namespace },
      };
      const expanded = await expandVm(opts.instancetypes, sent);
      if (typeof expanded === 'string') throw badRequest(expanded);
      return expanded;
    },
  );
}
