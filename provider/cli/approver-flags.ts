// The serving-CSR approver's flags, shared by `vkvm controllers` and `vkvm up`.
import type { ParseArgsConfig } from 'node:util';
import { ConfigError } from '../config.js';
import { checkDnsPattern, parseNodeIpRanges, type ServingCsrPolicy } from '../controllers/serving-policy.js';

export const APPROVER_OPTIONS = {
  'node-ip-ranges': { type: 'string', multiple: true },
  'node-dns-pattern': { type: 'string' },
} as const satisfies ParseArgsConfig['options'];

export const approverHelp = (rangesDefault: string): string => `Serving certificate approver flags (kubelet-serving CSRs of nodes):
  --node-ip-ranges CIDR[,CIDR]  every IP SAN must fall in one (repeatable; default ${rangesDefault})
  --node-dns-pattern REGEX      every DNS SAN other than the node name must match REGEX
                                entirely (default: the node name only)
`;

export interface ApproverFlags {
  'node-ip-ranges'?: string[] | undefined;
  'node-dns-pattern'?: string | undefined;
}

/** The approver's policy from its flags; `defaultRanges` when --node-ip-ranges is not given. */
export function servingCsrPolicy(flags: ApproverFlags, defaultRanges: () => string[]): ServingCsrPolicy {
  let nodeIpRanges: string[];
  try {
    nodeIpRanges = flags['node-ip-ranges']
      ? parseNodeIpRanges(flags['node-ip-ranges'].flatMap((v) => v.split(',')).map((v) => v.trim()))
      : defaultRanges();
  } catch (err) {
    throw new ConfigError('--node-ip-ranges', (err as Error).message);
  }
  const pattern = flags['node-dns-pattern'];
  if (pattern === undefined) return { nodeIpRanges };
  try {
    return { nodeIpRanges, dnsPattern: checkDnsPattern(pattern) };
  } catch (err) {
    throw new ConfigError('--node-dns-pattern', (err as Error).message);
  }
}
