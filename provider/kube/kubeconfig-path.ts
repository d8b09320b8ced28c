// Which kubeconfig a command uses: --kubeconfig, else $KUBECONFIG, as kubectl
// and kubeadm users expect.
import { existsSync } from 'node:fs';
import { delimiter } from 'node:path';

/**
 * `flag` when given; else the first file $KUBECONFIG lists that exists (as
 * kubeadm picks one file from the list), or the first listed when none does,
 * so the error names it. Undefined when neither is set.
 */
export function kubeconfigPath(
  flag: string | undefined,
  env: { KUBECONFIG?: string },
  exists: (path: string) => boolean = existsSync,
): string | undefined {
  if (flag) return flag;
  const listed = (env.KUBECONFIG ?? '').split(delimiter).filter(Boolean);
  return listed.find((f) => exists(f)) ?? listed[0];
}
