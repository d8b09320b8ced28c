// Stream benchmarks through the real control plane: how long a VNC client
// waits for its first whole frame of a running VM, from opening the WebSocket
// to kube-apiserver's node proxy (/vnc/<namespace>/<pod> on the node) to the
// last byte of the first full framebuffer update (rfb.ts).
import { createWebSocketStream, WebSocket, type ClientOptions } from 'ws';
import type { V1Pod } from '@kubernetes/client-node';
import { condition, waitFor } from '../e2e/framework/wait.js';
import { pods } from '../e2e/framework/watched.js';
import { abortable, type BenchContext, type Benchmark } from './bench.js';
import { startBenchNode, type BenchNode } from './cluster-node.js';
import { readFirstFrame } from './rfb.js';
import { percentile } from './stats.js';
import { TEST_GUEST_IMAGE } from '../../provider/images/test-guest-images.js';

const NODE = 'vkvm-bench-streams';
const NAMESPACE = 'bench-streams';
const BOOT_TIMEOUT_MS = 300_000;
/** VNC sessions opened one after another, each to its first frame. */
const VNC_SAMPLES = 10;

const vmPod: V1Pod = {
  metadata: { name: 'vnc', namespace: NAMESPACE },
  spec: {
    nodeSelector: { 'kubernetes.io/hostname': NODE },
    tolerations: [{ key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' }],
    containers: [{ name: 'vm', image: TEST_GUEST_IMAGE, resources: { requests: { cpu: '100m' }, limits: { memory: '192Mi' } } }],
  },
};

/** One VNC session through the node proxy: ms from the WebSocket's creation to the first whole frame. */
async function firstFrameMs(node: BenchNode, options: ClientOptions): Promise<number> {
  const server = node.clients.kc.getCurrentCluster()!.server.replace(/^https:/, 'wss:');
  const t0 = performance.now();
  const ws = new WebSocket(`${server}/api/v1/nodes/${NODE}/proxy/vnc/${NAMESPACE}/vnc`, ['plain.kubevirt.io'], options);
  const closed = new Promise((resolve) => ws.once('close', resolve));
  const stream = createWebSocketStream(ws);
  try {
    const frame = await readFirstFrame(stream, stream);
    const ms = performance.now() - t0;
    if (frame.bytes === 0) throw new Error(`an empty first frame: ${JSON.stringify(frame)}`);
    return ms;
  } finally {
    stream.destroy();
    await closed;
  }
}

async function vncFirstFrame(ctx: BenchContext): Promise<void> {
  const node = await startBenchNode(ctx, { nodeName: NODE, namespace: NAMESPACE });
  await node.clients.core.createNamespacedPod({ namespace: NAMESPACE, body: vmPod });
  await abortable(
    waitFor(pods(node.clients, NAMESPACE, { name: 'vnc' }), (p) => condition(p, 'Ready') === 'True', {
      what: 'Ready',
      deadlineMs: BOOT_TIMEOUT_MS,
    }),
    ctx.signal,
  );
  const options: ClientOptions = {};
  await node.clients.kc.applyToHTTPSOptions(options);
  const samples: number[] = [];
  for (let i = 0; i < VNC_SAMPLES; i++) samples.push(await abortable(firstFrameMs(node, options), ctx.signal));
  ctx.log(`first frames in ${samples.map((ms) => Math.round(ms)).join(', ')} ms`);
  ctx.emit('vnc_first_frame_ms', percentile(samples, 50), 'ms');
  ctx.emit('vnc_first_frame_ms_p95', percentile(samples, 95), 'ms');
}

export const STREAM_BENCHMARKS: readonly Benchmark[] = [
  {
    name: 'streams.vnc',
    description: `a running VM's VNC display through the node proxy: WebSocket to first whole frame (${VNC_SAMPLES} sessions)`,
    run: vncFirstFrame,
  },
];
