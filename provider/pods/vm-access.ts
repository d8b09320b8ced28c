// VmAccess for the kubelet API, over the pod cache and the launcher registry:
// console streams and guest commands go to the pod's launcher; console logs
// are read from its VM directory; usage from its cgroup; port-forward
// connects from the node to the pod's address on the pod network, VNC to the
// socket QEMU listens on in the launcher's directory.
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { connect, type Socket } from 'node:net';
import { Duplex } from 'node:stream';
import path from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { BadRequestError, ConflictError, NotFoundError, UnavailableError as ServiceUnavailableError } from '../kubelet-api/errors.js';
import {
  NoGuestAgentError,
  type ExecResult,
  type PodName,
  type PodRef,
  type VmAccess,
  type VmCpuMemory,
} from '../kubelet-api/vm-access.js';
import type { LauncherRegistry, LiveLauncher } from '../launchers/registry.js';
import {
  PreconditionError,
  UnavailableError,
  consoleLogPaths,
  CgroupNotFoundError,
  readVmUsage,
  connectVncSocket,
} from '../../launcher/agent-api.js';
import { objectKey } from '../kube/informer.js';
import { vmiOwner } from './vmi-source.js';
import { containerLogRefusal } from './container-log-status.js';

export interface PodSource {
  pod(key: string): V1Pod | undefined;
  pods(): readonly V1Pod[];
}

/** Where each VM is on the pod network (PodNetwork). */
export interface PodAddresses {
  /** The pod address leased to the VM, if it has one. */
  addressOf(uid: string): Promise<string | undefined>;
}

/** A TCP connection that may be half-closed from either end. */
function connectSocket(to: { host: string; port: number }): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ ...to, allowHalfOpen: true });
    socket.once('error', reject);
    socket.once('connect', () => {
      socket.off('error', reject);
      resolve(socket);
    });
  });
}

/** A UDP socket connected to host:port (it then sends only there and hears only from there). */
function connectUdp(host: string, port: number): Promise<UdpSocket> {
  return new Promise((resolve, reject) => {
    const socket = createSocket('udp4');
    socket.once('error', reject);
    socket.connect(port, host, () => {
      socket.off('error', reject);
      resolve(socket);
    });
  });
}

export function createVmAccess(pods: PodSource, registry: LauncherRegistry, addresses: PodAddresses): VmAccess {
  const resolve = (ref: PodName & { container?: string }): { pod: V1Pod; uid: string } => {
    const pod = pods.pod(objectKey(ref.namespace, ref.name));
    const uid = pod?.metadata?.uid;
    if (!pod || !uid) throw new NotFoundError(`pod ${ref.namespace}/${ref.name} not found on this node`);
    const container = pod.spec?.containers?.[0]?.name;
    if (ref.container && ref.container !== container)
      throw new NotFoundError(`container ${ref.container} not found in pod ${ref.namespace}/${ref.name}`);
    return { pod, uid };
  };
  const runningVm = (uid: string, ref: PodName): LiveLauncher => {
    const view = registry.get(uid);
    if (!view?.live || (view.state.phase !== 'Running' && view.state.phase !== 'Paused')) {
      throw new BadRequestError(`the VM of pod ${ref.namespace}/${ref.name} is not running`);
    }
    return view;
  };
  const running = (ref: PodName): LiveLauncher => runningVm(resolve(ref).uid, ref);

  /** A launcher call as the kubelet API answers it: its state errors as 409 and 503, not 500. */
  const guestCall = async <T>(ref: PodRef, call: (view: LiveLauncher) => Promise<T>): Promise<T> => {
    const view = running(ref);
    try {
      return await call(view);
    } catch (err) {
      if (err instanceof PreconditionError) throw new ConflictError(err.message, { cause: err });
      if (err instanceof UnavailableError) throw new ServiceUnavailableError(err.message, { cause: err });
      throw err;
    }
  };

  return {
    vmiPod(namespace, name) {
      const owned = pods.pods().filter((p) => p.metadata?.namespace === namespace && vmiOwner(p)?.name === name);
      // A restarted VMI's old pod may linger while it stops: the one whose VM is up comes first.
      const pod = owned.find((p) => registry.get(p.metadata?.uid ?? '')?.live) ?? owned[0];
      const owner = pod && vmiOwner(pod);
      if (!pod || !owner) throw new NotFoundError(`virtualmachineinstance ${namespace}/${name} has no launcher pod on this node`);
      return { namespace, name: pod.metadata!.name!, container: pod.spec?.containers?.[0]?.name ?? '', vmiUid: owner.uid };
    },

    guestUsers: (ref) => guestCall(ref, (view) => view.client.listGuestUsers()),
    guestFilesystems: (ref) => guestCall(ref, (view) => view.client.listGuestFilesystems()),
    guestInfo: (ref) =>
      guestCall(ref, async (view) => {
        const [agent, users, filesystems] = [
          await view.client.getGuestAgentInfo(),
          await view.client.listGuestUsers(),
          await view.client.listGuestFilesystems(),
        ];
        return { agent, users, filesystems, ...(view.state.guestOsInfo ? { os: view.state.guestOsInfo } : {}) };
      }),
    async softReboot(ref) {
      await guestCall(ref, (view) => view.client.softReboot());
    },

    async attachConsole(ref) {
      const view = running(ref);
      let session: ReturnType<typeof view.client.console> | undefined;
      const duplex = new Duplex({
        read() {
          session?.resume();
        },
        write(chunk: Buffer, _enc, cb) {
          session?.write(chunk);
          cb();
        },
        final(cb) {
          session?.close();
          cb();
        },
        destroy(err, cb) {
          session?.close();
          cb(err);
        },
      });
      session = view.client.console(
        (data) => {
          // Backpressure from the kubectl client reaches the launcher's stream.
          if (!duplex.push(data)) session?.pause();
        },
        (err) => (err ? duplex.destroy(err) : duplex.push(null)),
      );
      return duplex;
    },

    async guestExec(ref, command): Promise<ExecResult> {
      const view = running(ref);
      const [program, ...args] = command;
      if (!program) throw new BadRequestError('no command given');
      try {
        const r = await view.client.guestExec({ path: program, args });
        return { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode };
      } catch (err) {
        if (err instanceof PreconditionError && err.fieldPaths.includes('guestAgent')) {
          throw new NoGuestAgentError(`the VM has no guest agent; use kubectl exec -i (or attach) to reach its serial console`, {
            cause: err,
          });
        }
        if (err instanceof UnavailableError) {
          throw new NoGuestAgentError(
            `the guest agent does not answer (is the guest still booting?); kubectl exec -i reaches the serial console`,
            { cause: err },
          );
        }
        throw err;
      }
    },

    async consoleLogPath(ref, previous) {
      const { pod, uid } = resolve(ref);
      const refusal = containerLogRefusal(pod, ref.container, previous);
      if (refusal) throw new BadRequestError(refusal);
      const paths = consoleLogPaths(path.join(registry.dirOf(uid), 'console'));
      return previous ? paths.previous : paths.current;
    },

    async podPorts(ref) {
      const { uid } = resolve(ref);
      // Only the address this node leased to the pod: never a host or another pod's.
      const address = async (): Promise<string> => {
        runningVm(uid, ref);
        const leased = await addresses.addressOf(uid);
        if (!leased) throw new Error(`pod ${ref.namespace}/${ref.name} has no address on the pod network`);
        return leased;
      };
      return {
        uid,
        connect: async (port) => connectSocket({ host: await address(), port }),
        connectUdp: async (port) => connectUdp(await address(), port),
      };
    },

    async vncDisplay(ref) {
      const view = running(ref);
      return {
        uid: view.uid,
        // The launcher has QEMU listen there when the spec asks for a display (VmSpec.vnc).
        connect: async () => {
          const qemuUid = registry.qemuUidOf(view.uid);
          if (qemuUid === undefined) throw new Error(`the QEMU uid of the VM of pod ${ref.namespace}/${ref.name} is not known`);
          return connectVncSocket(view.dir, qemuUid).catch((err: NodeJS.ErrnoException) => {
            if (err.code === 'ENOENT') throw new BadRequestError('No graphics devices are present.');
            throw err;
          });
        },
      };
    },

    async listVmUsage(): Promise<VmCpuMemory[]> {
      const out: VmCpuMemory[] = [];
      for (const pod of pods.pods()) {
        const uid = pod.metadata?.uid;
        const view = uid ? registry.get(uid) : undefined;
        if (!uid || !view?.live || !view.state.startedAtUnixMs) continue;
        // A VM that stopped since the listing has no cgroup any more: left out, not an error.
        const usage = await readVmUsage({ uid, parent: registry.cgroupParent }).catch((err: unknown) => {
          if (err instanceof CgroupNotFoundError) return undefined;
          throw err;
        });
        if (!usage) continue;
        out.push({
          namespace: pod.metadata?.namespace ?? 'default',
          pod: pod.metadata?.name ?? '',
          podUID: uid,
          container: pod.spec?.containers?.[0]?.name ?? '',
          startTime: new Date(view.state.startedAtUnixMs),
          ...usage,
        });
      }
      return out;
    },
  };
}
