// Interfaces joined with networks by name, as KubeVirt does
// (pkg/network/admitter): every interface names a network and every network
// has an interface. vkvm connects the pod network only, through masquerade
// (NAT) or bridge; the provider's network plumbing creates and wires the tap,
// so the VmSpec carries just the binding, a stable MAC and the ports to forward.
import type { ForwardPort, InterfaceBinding } from '../../vmm/spec.js';
import type { Draft } from './draft.js';
import { derivedMac } from '../vm-identity.js';
import { hasField } from './supported-fields.js';
import type { Interface, Network } from './types.js';

/** KubeVirt's masquerade binding keeps this MAC for the in-pod bridge (pkg/network/link). */
export const RESERVED_MASQUERADE_MAC = '02:00:00:00:00:00';
const INTERFACE_NAME = /^[A-Za-z0-9_-]+$/;
/** Models KubeVirt accepts; vkvm emulates the first two. */
const VKVM_MODELS = ['virtio', 'e1000'] as const;
const KUBEVIRT_MODELS = ['virtio', 'e1000', 'e1000e', 'igb', 'ne2k_pci', 'pcnet', 'rtl8139'];
const BINDINGS = ['bridge', 'masquerade', 'sriov', 'slirp', 'macvtap', 'passt', 'passtBinding', 'binding'] as const;

/** A MAC in any form Go's net.ParseMAC takes for 48 bits (colons, hyphens, or dotted quads), lower-case with colons; null otherwise. */
export function normalizeMac(text: string): string | null {
  const m =
    /^([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})$/i.exec(text) ??
    /^([0-9a-f]{2})([0-9a-f]{2})\.([0-9a-f]{2})([0-9a-f]{2})\.([0-9a-f]{2})([0-9a-f]{2})$/i.exec(text);
  if (!m) return null;
  const separators = text.replace(/[0-9a-f]/gi, '');
  if (separators.length === 5 && new Set(separators).size !== 1) return null; // aa:bb-cc... is not a MAC
  return m.slice(1).join(':').toLowerCase();
}

function forwardPorts(d: Draft, iface: Interface, at: string): ForwardPort[] {
  const names = new Set<string>();
  return (iface.ports ?? []).flatMap((p, k) => {
    const pat = `${at}.ports[${k}]`;
    const before = d.causes.length;
    if (!p.port) d.report(pat, 'FieldValueRequired', 'Port field is mandatory.');
    else if (!Number.isInteger(p.port) || p.port < 1 || p.port > 65535)
      d.report(pat, 'FieldValueInvalid', 'Port field must be in range 0 < x < 65536.');
    const protocol = p.protocol ?? 'TCP';
    if (protocol !== 'TCP' && protocol !== 'UDP')
      d.report(`${pat}.protocol`, 'FieldValueInvalid', 'Unknown protocol, only TCP or UDP allowed');
    if (p.name) {
      if (names.has(p.name)) d.report(`${pat}.name`, 'FieldValueDuplicate', `Duplicate name of the port: ${p.name}`);
      names.add(p.name);
    }
    if (d.causes.length > before) return [];
    return [{ ...(p.name ? { name: p.name } : {}), protocol: protocol as 'TCP' | 'UDP', port: p.port }];
  });
}

export interface NetworkInput {
  interfaces: Interface[];
  networks: Network[];
  autoattachPodInterface: boolean;
  /** Seed of derived MACs (see derivedMac). */
  macSeed: string;
}

/** Translates spec.domain.devices.interfaces with spec.networks into d.interfaces and d.forwardPorts. */
export function translateNetwork(d: Draft, input: NetworkInput): void {
  let { interfaces, networks } = input;
  let origin = (i: number) => `spec.domain.devices.interfaces[${i}]`;
  if (interfaces.length === 0 && networks.length === 0 && input.autoattachPodInterface) {
    // KubeVirt's SetDefaultNetworkInterface: one interface on the pod network, bound by the cluster default.
    const binding = d.ctx.defaultInterfaceBinding ?? 'bridge';
    interfaces = [binding === 'masquerade' ? { name: 'default', masquerade: {} } : { name: 'default', bridge: {} }];
    networks = [{ name: 'default', pod: {} }];
    origin = () => 'spec.domain.devices.autoattachPodInterface';
  }

  const networkByName = new Map<string, Network>();
  let podNetwork: string | undefined;
  networks.forEach((net, k) => {
    const at = `spec.networks[${k}]`;
    if (!net.name) return void d.report(`${at}.name`, 'FieldValueRequired', 'a network needs a name');
    if (networkByName.has(net.name)) {
      return void d.report(
        `${at}.name`,
        'FieldValueDuplicate',
        `Network with name "${net.name}" already exists, every network must have a unique name`,
      );
    }
    networkByName.set(net.name, net);
    // KubeVirt: a network without a source is the pod network.
    const isPod = net.pod != null || Object.keys(net).every((key) => key === 'name');
    if (isPod) {
      if (podNetwork) d.report(at, 'FieldValueInvalid', `more than one pod network: ${podNetwork} is one already`);
      podNetwork ??= at;
    }
    if (!interfaces.some((iface) => iface.name === net.name)) {
      d.report(
        `${at}.name`,
        'FieldValueRequired',
        `${at}.name '${net.name}' not found: no interface of that name in spec.domain.devices.interfaces`,
      );
    }
  });

  const seen = new Set<string>();
  interfaces.forEach((iface, i) => {
    const at = origin(i);
    if (!iface.name || !INTERFACE_NAME.test(iface.name)) {
      return void d.report(
        `${at}.name`,
        'FieldValueInvalid',
        'Network interface name can only contain alphabetical characters, numbers, dashes (-) or underscores (_)',
      );
    }
    if (seen.has(iface.name))
      return void d.report(`${at}.name`, 'FieldValueDuplicate', 'Only one interface can be connected to one specific network');
    seen.add(iface.name);
    const net = networkByName.get(iface.name);
    if (!net)
      return void d.report(
        `${at}.name`,
        'FieldValueNotFound',
        `${at}.name '${iface.name}' not found: no network of that name in spec.networks`,
      );
    const isPod = net.pod != null || Object.keys(net).every((key) => key === 'name');

    const bindings = BINDINGS.filter((b) => hasField(iface, b));
    if (bindings.length > 1)
      return void d.report(at, 'FieldValueInvalid', `logical ${iface.name} interface can have only one binding (${bindings.join(', ')})`);
    // KubeVirt's default binding is bridge.
    const binding = bindings[0] ?? 'bridge';
    if (binding === 'masquerade' && !isPod)
      return void d.report(`${at}.name`, 'FieldValueInvalid', 'Masquerade interface only implemented with pod network');
    if ((binding !== 'masquerade' && binding !== 'bridge') || !isPod) return; // unsupported (schema walk)

    let mac = derivedMac(input.macSeed, iface.name);
    if (iface.macAddress) {
      const given = normalizeMac(iface.macAddress);
      if (!given)
        return void d.report(
          `${at}.macAddress`,
          'FieldValueInvalid',
          `interface ${at}.name has malformed MAC address (${iface.macAddress}).`,
        );
      if (binding === 'masquerade' && given === RESERVED_MASQUERADE_MAC) {
        return void d.report(
          `${at}.macAddress`,
          'FieldValueInvalid',
          'The requested MAC address is reserved for the in-pod bridge. Please choose another one.',
        );
      }
      mac = given;
    }
    if (iface.model && !(VKVM_MODELS as readonly string[]).includes(iface.model)) {
      const known = KUBEVIRT_MODELS.includes(iface.model);
      return void d.report(
        `${at}.model`,
        'FieldValueNotSupported',
        `interface ${at}.name uses model ${iface.model} that is not supported${known ? ' by vkvm (virtio, e1000)' : ''}.`,
      );
    }
    const ports = forwardPorts(d, iface, at);
    // KubeVirt allows "_" and capitals here; vmm names the libvirt alias after
    // the interface and wants a DNS label, and its cause comes back at .name.
    d.interfaces.push({
      name: iface.name,
      binding: binding satisfies InterfaceBinding,
      mac,
      ...(binding === 'masquerade' && ports.length ? { forwardPorts: ports } : {}),
      ...(iface.model ? { model: iface.model as (typeof VKVM_MODELS)[number] } : {}),
      ...(iface.bootOrder !== undefined ? { bootOrder: iface.bootOrder } : {}),
    });
    d.interfaceOrigins.push(at);
  });
}
