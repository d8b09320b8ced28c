// The wire between the nodes of `vkvm up --nodes N`: a bridge in this host's
// network namespace holding the host's address (the control plane's and
// node 1's), and per simulated host a network namespace whose eth0 is the
// far end of a veth on that bridge, with one address and a default route via
// the host, as a machine on a LAN has. Each call is idempotent; what a killed
// run left is replaced.
import { access } from 'node:fs/promises';
import { hostLink, ipBatch, refuseRouterAdvertisements, run } from '../network/host.js';
import { NETNS_DIR } from '../network/vm-network.js';
import type { LocalNode, Segment } from './layout.js';

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

/** The segment bridge, up, with the host's address on it. */
export async function ensureSegment(segment: Segment): Promise<void> {
  const address = `${segment.hostAddress}/${segment.range.prefixLength}`;
  if (!(await hostLink(segment.bridge))) {
    await ipBatch([['link', 'add', segment.bridge, 'type', 'bridge']]);
    await refuseRouterAdvertisements(segment.bridge);
  }
  await run(['ip', 'addr', 'replace', address, 'dev', segment.bridge]);
  await run(['ip', 'link', 'set', segment.bridge, 'up']);
}

export async function removeSegment(segment: Segment): Promise<void> {
  if (await hostLink(segment.bridge)) await run(['ip', 'link', 'del', segment.bridge]);
}

/** A fresh network namespace for the node, wired to the segment. */
export async function createNodeNetns(node: LocalNode, segment: Segment): Promise<void> {
  await removeNodeNetns(node);
  await run(['ip', 'netns', 'add', node.netns]);
  await ipBatch([
    ['link', 'add', node.hostVeth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', node.netns],
    ['link', 'set', node.hostVeth, 'master', segment.bridge],
    ['link', 'set', node.hostVeth, 'up'],
  ]);
  await ipBatch(
    [
      ['link', 'set', 'lo', 'up'],
      ['addr', 'add', `${node.address}/${segment.range.prefixLength}`, 'dev', 'eth0'],
      ['link', 'set', 'eth0', 'up'],
      ['route', 'add', 'default', 'via', segment.hostAddress],
    ],
    { netns: node.netns },
  );
}

/** The node's namespace and with it everything in it: its veth, bridge, rules and routes. */
export async function removeNodeNetns(node: LocalNode): Promise<void> {
  if (await exists(`${NETNS_DIR}/${node.netns}`)) await run(['ip', 'netns', 'del', node.netns]);
  // The veth goes with the namespace, a moment after it: gone by the time this runs is fine.
  if (await hostLink(node.hostVeth))
    await run(['ip', 'link', 'del', node.hostVeth]).catch(async (err: unknown) => {
      if (await hostLink(node.hostVeth)) throw err;
    });
}
