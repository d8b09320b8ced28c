// The preflight of the commands that set a host up (`vkvm join`, `vkvm up`):
// run before they start or write anything, so a host that cannot run VMs is
// refused with the fix rather than after a control plane or a join.
import { join } from 'node:path';
import type { AgentConfig } from '../config.js';
import { evaluatePreflight, type PreflightCheck } from './checks.js';
import { readPreflightFacts } from './facts.js';
import { vmsDirCheck } from './state-dir.js';

export async function hostPreflight(
  agent: Pick<AgentConfig, 'searchPath' | 'imageCacheDir' | 'stateDir' | 'allowSoftwareEmulation'>,
): Promise<PreflightCheck[]> {
  const facts = await readPreflightFacts({ searchPath: agent.searchPath, imageCacheDir: agent.imageCacheDir });
  return [
    ...evaluatePreflight(facts, { allowSoftwareEmulation: agent.allowSoftwareEmulation }),
    await vmsDirCheck(join(agent.stateDir, 'vms')),
  ];
}
