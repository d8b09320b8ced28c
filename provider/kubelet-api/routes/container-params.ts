// The path parameters of every per-container kubelet route
// (/containerLogs, /exec, /attach): /<route>/:namespace/:pod/:container.
export interface ContainerParams {
  namespace: string;
  pod: string;
  container: string;
}

export const containerParamsSchema = {
  type: 'object',
  required: ['namespace', 'pod', 'container'],
  properties: { namespace: { type: 'string' }, pod: { type: 'string' }, container: { type: 'string' } },
} as const;
