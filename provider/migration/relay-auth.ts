// Who may open which relay stream (docs/design/live-migration.md §4). KubeVirt's
// migration proxy accepts any certificate from its CA; vkvm accepts a stream
// only for a migration the API says runs from that peer to this node, only
// while it runs, and only once the target is ready for the stream's kind.
// Pure: the relay server gathers the facts and acts on the decision.
import { join } from 'node:path';
import type { StreamHeader, StreamKind } from './frames.js';

/** The subject of a verified client certificate, as node:tls reports it (a field repeated becomes an array). */
export interface CertSubject {
  CN?: string | string[];
  O?: string | string[];
}

/** The VMI's status.migrationState, the copy the controllers write (KubeVirt's field names). */
export interface MigrationStateCopy {
  migrationUid?: string;
  sourceNode?: string;
  targetNode?: string;
  completed?: boolean;
  failed?: boolean;
}

/** What the server learnt about a migration: read from the API on its first stream. */
export interface MigrationFacts {
  /** undefined: no VMI found for this migration. */
  migrationState: MigrationStateCopy | undefined;
  /** The local pod labelled kubevirt.io/migrationJobUID=<uid>, and its VM's directory; undefined when none. */
  targetPod: { vmDir: string } | undefined;
}

export interface StreamAuthInput {
  /** undefined: the TLS layer verified no client certificate. */
  peer: CertSubject | undefined;
  selfNode: string;
  header: Pick<StreamHeader, 'uid' | 'kind'>;
  facts: MigrationFacts;
  /** The target sent `ready` on the control stream: its launcher's sockets exist. */
  ready: boolean;
}

export type StreamDecision =
  { accept: true; peerNode: string; to: { kind: 'control' } | { kind: 'socket'; path: string } } | { accept: false; reason: string };

/**
 * Where each data stream goes on the target: the target launcher's private
 * libvirtd, and the sockets its QEMU listens on for memory and NBD.
 */
export const TARGET_SOCKETS: Record<Exclude<StreamKind, 'control'>, string[]> = {
  libvirt: ['libvirt', 'run', 'libvirt-sock'],
  memory: ['libvirt', 'run', 'm', 'mem'],
  disk: ['libvirt', 'run', 'm', 'nbd'],
};

const NODE_PREFIX = 'system:node:';
const NODES_GROUP = 'system:nodes';

const all = (v: string | string[] | undefined): string[] => (v === undefined ? [] : Array.isArray(v) ? v : [v]);

/** The node a certificate names, as the Node authorizer reads it: CN system:node:<name> in group system:nodes. */
export function nodeOfCertificate(subject: CertSubject | undefined): string | undefined {
  const cns = all(subject?.CN);
  if (cns.length !== 1 || !cns[0]!.startsWith(NODE_PREFIX) || !all(subject?.O).includes(NODES_GROUP)) return undefined;
  const name = cns[0]!.slice(NODE_PREFIX.length);
  return name === '' ? undefined : name;
}

/** Accept the stream and say where it goes, or refuse it with a reason the peer is told. The first failing check wins. */
export function authorizeStream(input: StreamAuthInput): StreamDecision {
  const { header, facts } = input;
  const uid = header.uid;
  const peerNode = nodeOfCertificate(input.peer);
  if (!peerNode) return refuse(`the client certificate is not a node's (want CN ${NODE_PREFIX}<name>, O ${NODES_GROUP})`);
  if (!facts.targetPod) return refuse(`no pod on node ${input.selfNode} is the target of migration ${uid}`);
  const state = facts.migrationState;
  if (state?.migrationUid !== uid) return refuse(`the VMI's migrationState does not name migration ${uid}`);
  if (state.sourceNode !== peerNode) return refuse(`migration ${uid} runs from node ${state.sourceNode ?? '(none)'}, not from ${peerNode}`);
  if (state.targetNode !== input.selfNode)
    return refuse(`migration ${uid} runs to node ${state.targetNode ?? '(none)'}, not to ${input.selfNode}`);
  if (state.completed) return refuse(`migration ${uid} has completed`);
  if (state.failed) return refuse(`migration ${uid} has failed`);
  if (header.kind === 'control') return { accept: true, peerNode, to: { kind: 'control' } };
  if (!input.ready) return refuse(`a ${header.kind} stream of migration ${uid} before the target is ready`);
  return { accept: true, peerNode, to: { kind: 'socket', path: join(facts.targetPod.vmDir, ...TARGET_SOCKETS[header.kind]) } };
}

const refuse = (reason: string): StreamDecision => ({ accept: false, reason });
