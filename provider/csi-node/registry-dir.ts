// Where a node agent watches for CSI drivers' registration sockets (the
// kubelet's plugins_registry). A host's one agent with the default state
// directory uses the kubelet's own path, where node-driver-registrar puts
// sockets by default. An agent with a state directory of its own (several
// agents on one host, as `vkvm up --nodes N` runs them) gets
// <state-dir>/plugins_registry, so each registers only its own node's drivers.
import { join, resolve } from 'node:path';

export const DEFAULT_PLUGIN_REGISTRY_DIR = '/var/lib/kubelet/plugins_registry';
/** The agent's default --state-dir (config.ts). */
const DEFAULT_STATE_DIR = '/var/lib/vkvm';

/** The plugin registry dir of the agent with this --state-dir, when --plugin-registry-dir does not name one. */
export function pluginRegistryDirOf(stateDir: string | undefined): string {
  if (stateDir === undefined || resolve(stateDir) === DEFAULT_STATE_DIR) return DEFAULT_PLUGIN_REGISTRY_DIR;
  return join(resolve(stateDir), 'plugins_registry');
}

/** The registration socket `vkvm csi --registration-socket` should serve for the agent whose registry dir this is. */
export function registrationSocketIn(registryDir: string, driver: string): string {
  return join(registryDir, `${driver}-reg.sock`);
}
