// The settings a migration runs with: KubeVirt's migration defaults
// (pkg/virt-config/virt-config.go), which `vkvm controllers` flags override
// cluster-wide (vkvm has no KubeVirt CR), then the MigrationPolicy that
// matches the VMI best, as KubeVirt's matchPolicy picks it
// (watch/migration/migrationpolicy.go): every label of both its selectors must
// match (VMI labels, namespace labels); the most matching VMI labels win,
// then the most namespace labels; a tie goes to the lowest name. Pure.
import { parseQuantity } from '../../kube/quantity.js';
import type { MigrationConfiguration, MigrationPolicy } from '../../kubevirt/types.js';
import type { Settings } from './status.js';

export interface MigrationLimits {
  /** Migrations running at once in the cluster (KubeVirt's parallelMigrationsPerCluster). */
  perCluster: number;
  /** Migrations running at once out of one node (parallelOutboundMigrationsPerNode). */
  outboundPerNode: number;
}

export interface MigrationDefaults extends MigrationLimits {
  progressTimeoutS: number;
  completionTimeoutPerGiB: number;
  /** Bytes per second as a quantity; "0" is unlimited. */
  bandwidthPerMigration: string;
  allowAutoConverge: boolean;
}

export const KUBEVIRT_MIGRATION_DEFAULTS: MigrationDefaults = {
  perCluster: 5,
  outboundPerNode: 2,
  progressTimeoutS: 150,
  completionTimeoutPerGiB: 150,
  bandwidthPerMigration: '0',
  allowAutoConverge: false,
};

/** A bandwidth flag or policy value, checked: a quantity of bytes per second, 0 meaning unlimited. */
export function checkBandwidth(value: string): string {
  const bytes = parseQuantity(value);
  if (bytes === null || bytes < 0) throw new Error(`"${value}" is not a quantity of bytes per second (0 = unlimited)`);
  return value;
}

function score(policy: MigrationPolicy, vmiLabels: Record<string, string>, nsLabels: Record<string, string>): [number, number] | undefined {
  const selectors = policy.spec.selectors;
  if (!selectors) return undefined;
  const count = (wanted: Record<string, string> | undefined, have: Record<string, string>) => {
    const entries = Object.entries(wanted ?? {});
    return entries.every(([k, v]) => have[k] === v) ? entries.length : undefined;
  };
  const vmi = count(selectors.virtualMachineInstanceSelector, vmiLabels);
  const ns = count(selectors.namespaceSelector, nsLabels);
  return vmi === undefined || ns === undefined ? undefined : [vmi, ns];
}

export function matchPolicy(
  policies: readonly MigrationPolicy[],
  vmiLabels: Record<string, string>,
  nsLabels: Record<string, string>,
): MigrationPolicy | undefined {
  let best: { policy: MigrationPolicy; s: [number, number] } | undefined;
  for (const policy of policies) {
    const s = score(policy, vmiLabels, nsLabels);
    if (!s) continue;
    const better =
      !best ||
      s[0] > best.s[0] ||
      (s[0] === best.s[0] &&
        (s[1] > best.s[1] || (s[1] === best.s[1] && (policy.metadata.name ?? '') < (best.policy.metadata.name ?? ''))));
    if (better) best = { policy, s };
  }
  return best?.policy;
}

/** The defaults, overridden by what the policy sets. */
export function migrationSettings(defaults: MigrationDefaults, policy: MigrationPolicy | undefined): Settings {
  const p = policy?.spec;
  const configuration: MigrationConfiguration = {
    allowAutoConverge: p?.allowAutoConverge ?? defaults.allowAutoConverge,
    bandwidthPerMigration: p?.bandwidthPerMigration !== undefined ? String(p.bandwidthPerMigration) : defaults.bandwidthPerMigration,
    completionTimeoutPerGiB: p?.completionTimeoutPerGiB ?? defaults.completionTimeoutPerGiB,
    progressTimeout: defaults.progressTimeoutS,
    allowWorkloadDisruption: p?.allowWorkloadDisruption ?? false,
    allowPostCopy: false,
  };
  return { ...(policy?.metadata.name ? { policyName: policy.metadata.name } : {}), configuration };
}
