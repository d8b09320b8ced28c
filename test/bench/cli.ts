// How long the vkvm command line takes to start, against a bare Node start in
// the same run: every command the operator, `vkvm up` or a test spawns pays
// it (`vkvm csi` per node, `vkvm images`, `vkvm version`).
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { packageRoot } from '../../provider/package-root.js';
import type { Benchmark } from './bench.js';
import { percentile } from './stats.js';

const RUNS = 15;

/** Wall time and peak RSS of one run of `argv` under Node, from /usr/bin/time. */
function timed(argv: string[]): { ms: number; rssKib: number } {
  const t0 = performance.now();
  const r = spawnSync('/usr/bin/time', ['-f', '%M', process.execPath, ...argv], { encoding: 'utf8' });
  const ms = performance.now() - t0;
  if (r.status !== 0) throw new Error(`${argv.join(' ')} exited ${r.status}: ${r.stderr}`);
  return { ms, rssKib: Number(r.stderr.trim().split('\n').at(-1)) };
}

export const CLI_BENCHMARKS: Benchmark[] = [
  {
    name: 'cli.start',
    description: '`vkvm version` and `vkvm csi --help`, start to exit, against `node -e 0` (15 runs each, alternated)',
    async run(ctx) {
      const cli = join(packageRoot(), 'dist/provider/cli/main.js');
      const cases = { node: ['-e', '0'], version: [cli, 'version'], csi_help: [cli, 'csi', '--help'] };
      const samples = Object.fromEntries(Object.keys(cases).map((k) => [k, [] as { ms: number; rssKib: number }[]]));
      for (let i = 0; i < RUNS && !ctx.signal.aborted; i++) for (const [k, argv] of Object.entries(cases)) samples[k]!.push(timed(argv));
      const p50 = (k: string) =>
        percentile(
          samples[k]!.map((s) => s.ms),
          50,
        );
      const rss = (k: string) =>
        percentile(
          samples[k]!.map((s) => s.rssKib / 1024),
          50,
        );
      for (const k of ['node', 'version', 'csi_help']) {
        ctx.emit(`cli_${k}_ms_p50`, p50(k), 'ms');
        ctx.emit(`cli_${k}_rss_mib_p50`, rss(k), 'MiB');
      }
      ctx.emit('cli_version_over_node_start', p50('version') / p50('node'), 'ratio');
    },
  },
];
