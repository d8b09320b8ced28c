// GET virtualmachines/NAME/expand-spec and PUT expand-vm-spec (virtctl
// expand): the VM with its instance type and preference expanded into its
// template, as KubeVirt's ExpandSpecRequestHandler answers. vkvm serves no
// instance types or preferences: a VM that names neither is its own
// expansion, and one that names them is refused with the field named
// (KubeVirt's codes: 500 for a stored VM, 400 for one sent).
import type { FastifyInstance } from 'fastify';
import type { KubevirtApi } from '../../kubevirt/client.js';
import { KUBEVIRT_API_VERSION, type VirtualMachine } from '../../kubevirt/types.js';
import { badRequest, fromApiError, StatusError } from '../errors.js';
import { NAMESPACED, nameParams, type NameParams } from './params.js';

export interface ExpandRoutesOptions {
  kubevirt: KubevirtApi;
}

/** The fields whose expansion vkvm cannot do, as field paths. */
export function unexpandable(vm: VirtualMachine): string[] {
  const spec = (vm.spec ?? {}) as Record<string, unknown>;
  return ['instancetype', 'preference'].filter((f) => spec[f] != null).map((f) => `spec.${f}`);
}

const notServed = (fields: string[]) => `${fields.join(', ')}: instance types and preferences are not served by vkvm`;

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
      const fields = unexpandable(vm);
      if (fields.length > 0) throw new StatusError('InternalError', `Internal error occurred: ${notServed(fields)}`);
      return vm;
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
      const fields = unexpandable(vm);
      if (fields.length > 0) throw badRequest(notServed(fields));
      return { ...vm, apiVersion: KUBEVIRT_API_VERSION, kind: 'VirtualMachine', metadata: { ...(vm.metadata ?? {}), namespace } };
    },
  );
}
