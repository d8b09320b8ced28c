// The guest's address written into cloud-init's network-config (v2), for
// images that configure networking from cloud-init rather than by DHCP. A
// network-config the user gave (KubeVirt's networkData) is left as it is.
// JSON is YAML, so the document is written as JSON: no YAML emitter needed.
import type { DiskSpec } from '../../vmm/spec.js';
import type { GuestDns } from './resolver.js';

export interface GuestAddress {
  mac: string;
  /** "a.b.c.d/len" */
  address: string;
  gateway: string;
  dns: GuestDns;
}

export function networkConfigV2(a: GuestAddress): string {
  return `${JSON.stringify(
    {
      version: 2,
      ethernets: {
        default: {
          match: { macaddress: a.mac },
          addresses: [a.address],
          routes: [{ to: '0.0.0.0/0', via: a.gateway }],
          ...(a.dns.nameservers.length || a.dns.searches.length
            ? {
                nameservers: {
                  ...(a.dns.nameservers.length ? { addresses: a.dns.nameservers } : {}),
                  ...(a.dns.searches.length ? { search: a.dns.searches } : {}),
                },
              }
            : {}),
        },
      },
    },
    null,
    2,
  )}\n`;
}

/** The disks with the address written into every cloud-init seed that has no network-config. */
export function withNetworkConfig(disks: DiskSpec[], a: GuestAddress): DiskSpec[] {
  return disks.map((d) =>
    d.source.kind === 'cloudInit' && d.source.networkConfig === undefined
      ? { ...d, source: { ...d.source, networkConfig: networkConfigV2(a) } }
      : d,
  );
}
