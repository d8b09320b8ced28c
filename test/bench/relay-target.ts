// The target node's side of the relay bench (relay.ts), in its own process as
// on a real node: a relay server and two sinks, one behind the relay (where
// the target QEMU's memory socket would be) and one reached directly (the
// baseline). Driven over IPC: it is sent an Init, answers with its port, and
// reports each time a sink has received `bytesPerRun` on one connection.
import { once } from 'node:events';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { pino } from 'pino';
import { RelayServer } from '../../provider/migration/relay-server.js';
import type { RelayCredentials } from '../../provider/migration/relay-tls.js';

export interface Init {
  uid: string;
  vmDir: string;
  directPath: string;
  serving: RelayCredentials;
  bytesPerRun: number;
}
export type TargetMessage = { port: number } | { received: 'relayed' | 'direct' };

async function sink(path: string, name: 'relayed' | 'direct', bytes: number): Promise<void> {
  const server = createServer((socket) => {
    let count = 0;
    socket.on('error', () => {});
    socket.on('data', (chunk: Buffer) => {
      const before = count;
      count += chunk.length;
      if (before < bytes && count >= bytes) process.send!({ received: name } satisfies TargetMessage);
    });
  });
  server.listen(path);
  await once(server, 'listening');
}

process.once('message', (init: Init) => {
  void (async () => {
    const server = new RelayServer({
      selfNode: 'b',
      credentials: init.serving,
      lookup: async () => ({
        migrationState: { migrationUid: init.uid, sourceNode: 'a', targetNode: 'b' },
        targetPod: { vmDir: init.vmDir },
      }),
      // The bench's control streams only open and close; the target is ready at once.
      onControl: () => server.markReady(init.uid),
      log: pino({ level: 'silent' }),
    });
    const { port } = await server.listen(0, '127.0.0.1');
    await sink(join(init.vmDir, 'libvirt', 'run', 'm', 'mem'), 'relayed', init.bytesPerRun);
    await sink(init.directPath, 'direct', init.bytesPerRun);
    process.send!({ port } satisfies TargetMessage);
  })();
});
// The parent ends this process by closing the IPC channel (or by SIGTERM).
process.once('disconnect', () => process.exit(0));
