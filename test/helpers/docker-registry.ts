// Debian's docker-registry (distribution 2.8) as the tests' real registry: one
// instance per test on a free loopback port (or the address a test names), its storage under the test's
// scratch directory, htpasswd (bcrypt) auth when asked, and every line it
// logs kept, so a test can tell whether the node asked it anything.
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Test } from 'tap';
import { freePort } from '../../deploy/cluster/cluster.js';

export interface DockerRegistry {
  /** host:port, as image references name it. */
  host: string;
  /** http://host:port */
  base: string;
  /** Every line the registry logged (access lines name the method and path). */
  log: string[];
  /** Requests (method and path) logged since `mark`. */
  requestsSince(mark: number): string[];
}

/** `t`: a tap test, or whatever else runs teardowns (the bench's context). */
export async function startDockerRegistry(
  t: Pick<Test, 'teardown'>,
  opts: {
    dir: string;
    auth?: { user: string; password: string };
    /** host:port to listen on; a free loopback port when not given. */
    addr?: string;
  },
): Promise<DockerRegistry> {
  mkdirSync(opts.dir, { recursive: true });
  const host = opts.addr ?? `127.0.0.1:${await freePort()}`;
  const config = join(opts.dir, 'registry.yml');
  const htpasswd = join(opts.dir, 'htpasswd');
  if (opts.auth) writeFileSync(htpasswd, execFileSync('htpasswd', ['-Bbn', opts.auth.user, opts.auth.password]));
  writeFileSync(
    config,
    [
      'version: 0.1',
      'log:',
      '  level: info',
      '  accesslog:',
      '    disabled: false',
      'storage:',
      '  filesystem:',
      `    rootdirectory: ${join(opts.dir, 'storage')}`,
      '  delete:',
      '    enabled: true',
      'http:',
      `  addr: ${host}`,
      ...(opts.auth ? ['auth:', '  htpasswd:', '    realm: vkvm-test', `    path: ${htpasswd}`] : []),
      '',
    ].join('\n'),
  );
  const child = spawn('docker-registry', ['serve', config], { stdio: ['ignore', 'pipe', 'pipe'] });
  const log: string[] = [];
  for (const stream of [child.stdout, child.stderr]) createInterface({ input: stream }).on('line', (line) => log.push(line));
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  t.teardown(async () => {
    if (child.exitCode === null) child.kill('SIGTERM');
    await exited;
  });
  const base = `http://${host}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    const status = await fetch(`${base}/v2/`).then(
      (r) => r.status,
      () => 0,
    );
    if (status === 200 || status === 401) break;
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`docker-registry did not start:\n${log.join('\n')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const requestsSince = (mark: number) =>
    log.slice(mark).flatMap((line) => {
      // Access log lines: ... "GET /v2/app/manifests/v1 HTTP/1.1" 200 ...
      const m = /"(GET|HEAD|PUT|POST|PATCH|DELETE) (\/v2\/[^ ]*) HTTP/.exec(line);
      return m ? [`${m[1]} ${m[2]}`] : [];
    });
  return { host, base, log, requestsSince };
}
