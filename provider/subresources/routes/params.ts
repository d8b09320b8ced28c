// Paths and schemas the route groups share.
import { GROUP, VERSION } from '../auth.js';

export const NAMESPACED = `/apis/${GROUP}/${VERSION}/namespaces/:namespace`;

export interface NameParams {
  namespace: string;
  name: string;
}

export const nameParams = {
  type: 'object',
  properties: { namespace: { type: 'string', minLength: 1 }, name: { type: 'string', minLength: 1 } },
  required: ['namespace', 'name'],
} as const;

/** metav1 dryRun: ["All"] validates without persisting; KubeVirt accepts nothing else. */
export const dryRunSchema = { type: 'array', items: { type: 'string', enum: ['All'] } } as const;

export const isDryRun = (dryRun: string[] | undefined): boolean => dryRun?.[0] === 'All';
