// The container images a local cluster's container nodes run, built on this
// machine and never pulled (the machine may have no registry to pull from):
//   localhost/vkvm/pause:v1           the pod sandbox (deploy/cluster/cmd/pause)
//   localhost/vkvm/coredns:v1.12.1    cluster DNS (deploy/cluster/cmd/coredns)
//   localhost/vkvm/toolbox:v1         Debian's busybox-static with every applet
//                                     linked (sh, wget, nslookup, nc, httpd, ...)
// The Go programs come from the control plane's build (one module, cached by
// source hash), busybox from the host's Debian package. One OCI layout holds
// all three, written deterministically and cached under a key of its inputs,
// so an unchanged machine writes it once.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { ClusterBinaries } from '../../deploy/cluster/cluster.js';
import type { LayoutImage } from './layout-writer.js';
import { ensureLayout } from './test-guest-images.js';

const execFileP = promisify(execFile);

export const PAUSE_IMAGE = 'localhost/vkvm/pause:v1';
/** Tagged with the CoreDNS release it is built from (deploy/cluster/go.mod). */
export const COREDNS_IMAGE = 'localhost/vkvm/coredns:v1.12.1';
export const TOOLBOX_IMAGE = 'localhost/vkvm/toolbox:v1';
export const BUSYBOX = '/bin/busybox';

/** The image files of busybox: the binary and a link per applet at the path `busybox --list-full` gives it. */
export function busyboxFiles(appletPaths: string[], source = BUSYBOX) {
  const links = appletPaths
    .map((p) => p.trim())
    .filter((p) => p && p !== 'bin/busybox')
    .sort()
    .map((path) => ({ path, linkTo: '/bin/busybox' }));
  return [{ path: 'bin/busybox', source, executable: true }, ...links];
}

/** The three images, from the built binaries and busybox's applet list. */
export function localImages(bins: Pick<ClusterBinaries, 'pause' | 'coredns'>, appletPaths: string[]): LayoutImage[] {
  return [
    { name: PAUSE_IMAGE, owner: 0, files: [{ path: 'pause', source: bins.pause, executable: true }], config: { Entrypoint: ['/pause'] } },
    {
      name: COREDNS_IMAGE,
      owner: 0,
      files: [{ path: 'coredns', source: bins.coredns, executable: true }],
      config: { Entrypoint: ['/coredns'] },
    },
    {
      name: TOOLBOX_IMAGE,
      owner: 0,
      // /etc's hosts and resolv.conf are the kubelet's mounts; scratch space is an emptyDir's.
      files: busyboxFiles(appletPaths),
      config: { Cmd: ['sh'], Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'] },
    },
  ];
}

async function fileHash(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest('hex');
}

/** The OCI layout of the local images beside the builds they come from (`cacheDir`/cluster/images), written on first use. */
export async function ensureLocalImages(bins: ClusterBinaries, cacheDir: string): Promise<string> {
  const { stdout } = await execFileP(BUSYBOX, ['--list-full']);
  // The binaries' paths name their build (a source-hash directory); busybox's does not, so its bytes key the layout.
  return ensureLayout(join(cacheDir, 'cluster', 'images'), localImages(bins, stdout.split('\n')), await fileHash(BUSYBOX));
}
