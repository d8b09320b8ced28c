// The e2e test framework: a control plane and namespace per test file, node
// agents, pod and KubeVirt fixtures, and watch-based waits with a deadline that
// fail with the last state seen.
export * from './agent.js';
export * from './cluster.js';
export * from './commands.js';
export * from './faults.js';
export * from './kubevirt.js';
export * from './local-cluster.js';
export * from './pods.js';
export * from './tenant.js';
export * from './wait.js';
export * from './watched.js';
export { isRunning, pidsWhere, qemuPids, qemuPidsOf, qemuPidsOfDomain } from '../../helpers/processes.js';
export * from './subresource-api.js';
