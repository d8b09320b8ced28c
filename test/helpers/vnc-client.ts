// Test support (no production code imports it): a real VNC client, Python's
// vncdotool from PyPI, installed with pip into a virtualenv in the cache
// (pinned, installed once per version), and a local TCP port in front of a
// WebSocket that carries raw RFB bytes, for clients that only speak TCP.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Test } from 'tap';
import { createWebSocketStream, WebSocket, type ClientOptions } from 'ws';
import { defaultCacheDir } from '../../deploy/cluster/cluster.js';

const execFileP = promisify(execFile);

export const VNCDOTOOL_VERSION = '1.4.2';

/** The virtualenv's directory, installing vncdotool into it when the cache has none. */
export async function ensureVncdotool(cacheDir = defaultCacheDir()): Promise<string> {
  const dir = join(cacheDir, 'test-tools', `vncdotool-${VNCDOTOOL_VERSION}`);
  // Written last: a venv without it was cut short, and is made again. (A venv
  // cannot be moved into place once built: its scripts name its path.)
  const installed = join(dir, '.installed');
  if (existsSync(installed)) return dir;
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
  // Debian's python3, with its venv module (python3-venv).
  await execFileP('/usr/bin/python3', ['-m', 'venv', dir]);
  await execFileP(join(dir, 'bin', 'pip'), ['install', '--quiet', `vncdotool==${VNCDOTOOL_VERSION}`], { maxBuffer: 1 << 22 });
  await writeFile(installed, `vncdotool ${VNCDOTOOL_VERSION}\n`);
  return dir;
}

export interface Screenshot {
  width: number;
  height: number;
  /** Distinct pixel colours. */
  colours: number;
}

const COUNT_COLOURS = `
import json, sys
from PIL import Image
im = Image.open(sys.argv[1]).convert('RGB')
print(json.dumps({'width': im.width, 'height': im.height, 'colours': len(im.getcolors(im.width * im.height))}))
`;

/**
 * Connects vncdotool to `server` (host::port), which runs the RFB handshake
 * and reads one full framebuffer update into a PNG, and describes the picture.
 */
export async function captureScreen(venv: string, server: string): Promise<Screenshot> {
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-vnc-capture-'));
  try {
    const png = join(dir, 'screen.png');
    await execFileP(join(venv, 'bin', 'vncdo'), ['--server', server, '--timeout', '60', 'capture', png]);
    const { stdout } = await execFileP(join(venv, 'bin', 'python'), ['-c', COUNT_COLOURS, png]);
    return JSON.parse(stdout) as Screenshot;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * A loopback TCP port; each connection to it opens a WebSocket to `url`
 * (subprotocol plain.kubevirt.io) and relays raw bytes both ways. Closed
 * with the test.
 */
export async function tcpToWebSocket(t: Test, url: string, options: ClientOptions = {}): Promise<number> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    const ws = new WebSocket(url, ['plain.kubevirt.io'], options);
    const stream = createWebSocketStream(ws);
    stream.on('error', () => socket.destroy());
    socket.on('error', () => stream.destroy());
    socket.pipe(stream).pipe(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const s of sockets) s.destroy();
    server.close();
  });
  return (server.address() as AddressInfo).port;
}
