// One simulated node's pod network, driven over stdin for tests that need
// several nodes on one machine (test/integration/moved-address.test.ts): run
// inside the node's network namespace (`ip netns exec`, which also gives it
// the namespace's /sys), it owns a real PodNetwork and answers one JSON line
// per request. Its peers are read from a file the test writes (standing in
// for the Node informer), and what it publishes as hosted goes to a file
// (standing in for its Node's annotation), what it lends to another (its
// other annotation).
//   node dist/test/helpers/node-network-driver.js '{"name":…,"bridge":…,"dir":…,"podCidr":…,"peersFile":…,"hostedFile":…,"lentFile":…}'
//   stdin:  {"id":1,"op":"attach","args":[spec]}    stdout: {"id":1,"ok":true,"result":…}
import { readFileSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { pino } from 'pino';
import { PodNetwork } from '../../provider/network/pod-network.js';
import type { PeerNode } from '../../provider/network/peer-routes.js';

export interface NodeNetworkDriverSpec {
  name: string;
  bridge: string;
  dir: string;
  podCidr: string;
  peersFile: string;
  hostedFile: string;
  lentFile: string;
}

export interface DriverRequest {
  id: number;
  op: 'ensureNode' | 'attach' | 'attachIncoming' | 'claimMovedAddress' | 'handOverAddress' | 'detach' | 'retainOnly' | 'close';
  args: unknown[];
}

const spec = JSON.parse(process.argv[2]!) as NodeNetworkDriverSpec;
const log = pino({ level: 'warn' }, pino.destination(2));
const network = new PodNetwork({
  bridge: spec.bridge,
  dir: spec.dir,
  nodeName: spec.name,
  podCidr: async () => spec.podCidr,
  peers: () => JSON.parse(readFileSync(spec.peersFile, 'utf8')) as PeerNode[],
  publishMoved: async ({ hosted, lent }) => {
    writeFileSync(spec.hostedFile, JSON.stringify(hosted));
    writeFileSync(spec.lentFile, JSON.stringify(lent));
  },
  log,
});

async function handle(r: DriverRequest): Promise<unknown> {
  const a = r.args as never[];
  switch (r.op) {
    case 'ensureNode':
      return network.ensureNode();
    case 'attach':
      return network.attach(a[0]!);
    case 'attachIncoming':
      return network.attachIncoming(a[0]!, a[1]!);
    case 'claimMovedAddress':
      return network.claimMovedAddress(a[0]!);
    case 'handOverAddress':
      return network.handOverAddress(a[0]!, a[1]!);
    case 'detach':
      return network.detach(a[0]!);
    case 'retainOnly': {
      const keep = new Set(r.args[0] as string[]);
      return network.retainOnly((uid) => keep.has(uid));
    }
    case 'close':
      return network.close({ removeAll: true });
  }
}

const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  const r = JSON.parse(line) as DriverRequest;
  handle(r).then(
    (result) => process.stdout.write(`${JSON.stringify({ id: r.id, ok: true, result: result ?? null })}\n`),
    (err: Error) => process.stdout.write(`${JSON.stringify({ id: r.id, ok: false, error: err.message })}\n`),
  );
});
lines.on('close', () => process.exit(0));
