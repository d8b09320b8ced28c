// The target side's rules with fakes for the manager and the domain: what PrepareIncoming answers, idempotency per
// uid, nothing resumed before a domain arrived, and CancelIncoming removing what was made but never a running VM.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import { testRuntime, testSpec } from '../vmm/testing/specs.js';
import type { DomainStateName } from './domain-driver.js';
import { MIGRATION_SOCKET_DIR, MigrationTarget } from './migration-target.js';
import type { MigrationState, VmState } from './state.js';

const spec = testSpec({
  systemUuid: '5b7e2f0a-4c1d-5e8f-9a2b-3c4d5e6f7a8b',
  kernelBoot: { kernelPath: '/img/vmlinuz', initrdPath: '/img/initrd', cmdline: '' },
  disks: [{ name: 'data', device: 'disk', bus: 'virtio', source: { kind: 'empty', sizeMiB: 16 } }],
});

function target(domain: { state: DomainStateName }) {
  const runDir = t.testdir();
  const calls: string[] = [];
  const migrations: MigrationState[] = [];
  const running = { phase: 'Running', reason: 'Migrated' } as VmState;
  const m = new MigrationTarget({
    uid: spec.uid,
    manager: {
      prepareIncoming: async (s) => {
        calls.push('prepare');
        return {
          onHost: s,
          runtime: testRuntime({ disks: { data: { path: `${runDir}/disks/data.qcow2`, format: 'qcow2', modes: { cache: 'none' } } } }),
        };
      },
      finishIncoming: async () => {
        calls.push('resume');
        domain.state = 'running';
        return running;
      },
      setMigration: (s) => migrations.push(s),
    },
    driver: {
      state: async () => domain.state,
      destroy: async () => {
        calls.push('destroy');
        domain.state = 'shutoff';
      },
      undefine: async () => {
        calls.push('undefine');
        domain.state = 'absent';
      },
      announceSelf: async () => void calls.push('announce'),
    },
    vmm: { validate: () => null, removeDisks: async () => void calls.push('removeDisks') },
    libvirtRunDir: runDir,
    qemuUser: { uid: process.getuid!(), gid: process.getgid!() },
    log: pino({ level: 'silent' }),
  });
  return { m, calls, migrations, runDir };
}

t.test('PrepareIncoming answers the host paths, once per uid; another uid is refused', async (t) => {
  const { m, calls, migrations, runDir } = target({ state: 'absent' });
  const paths = await m.prepare('m1', JSON.stringify(spec));
  t.same(paths, {
    diskPaths: { data: `${runDir}/disks/data.qcow2` },
    consoleSocket: '/run/vkvm/vms/test/console.sock',
    agentSocket: '/run/vkvm/vms/test/qga.sock',
    vncSocket: '/run/vkvm/vms/test/vnc.sock',
    nvramPath: '',
    bootPaths: { kernel: '/img/vmlinuz', initrd: '/img/initrd' },
  });
  t.ok(existsSync(join(runDir, MIGRATION_SOCKET_DIR)), 'the socket dir the target QEMU listens in');
  t.same(await m.prepare('m1', JSON.stringify(spec)), paths, 'again: the same answer');
  t.same(calls, ['prepare'], 'prepared once');
  t.match(await m.prepare('m2', JSON.stringify(spec)).catch((e: unknown) => e), { kind: 'Precondition' }, 'another uid');
  t.match(await m.prepare('m1', '{').catch((e: unknown) => e), { kind: 'SpecError' }, 'a bad spec');
  t.match(migrations, [{ uid: 'm1', role: 'Target', phase: 'Prepared' }]);
});

t.test('FinishIncoming resumes and announces a received domain once; before one arrived it is refused', async (t) => {
  const domain = { state: 'absent' as DomainStateName };
  const { m, calls, migrations } = target(domain);
  t.match(await m.finish('m1').catch((e: unknown) => e), { kind: 'Precondition' }, 'not prepared');
  await m.prepare('m1', JSON.stringify(spec));
  t.match(await m.finish('m1').catch((e: unknown) => e), { kind: 'Precondition', message: /no domain/ }, 'nothing received');
  domain.state = 'paused';
  t.match(await m.finish('m1'), { phase: 'Running' });
  t.match(await m.finish('m1'), { phase: 'Running' }, 'again: a no-op');
  t.same(calls, ['prepare', 'resume', 'announce', 'resume'], 'announced once');
  t.same(
    migrations.map((s) => s.phase),
    ['Prepared', 'ReceivedPaused', 'Resumed'],
  );
  t.match(await m.cancel('m1').catch((e: unknown) => e), { kind: 'Precondition' }, 'no cancel once the VM runs here');
});

t.test('CancelIncoming destroys a received domain and removes what was prepared; idempotent', async (t) => {
  const { m, calls, migrations, runDir } = target({ state: 'paused' });
  await m.cancel('m0');
  t.same(calls, [], 'nothing prepared: nothing to do');
  await m.prepare('m1', JSON.stringify(spec));
  await m.cancel('m1');
  await m.cancel('m1');
  t.same(calls, ['prepare', 'destroy', 'undefine', 'removeDisks', 'undefine', 'removeDisks']);
  t.notOk(existsSync(join(runDir, MIGRATION_SOCKET_DIR)), 'the socket dir is removed');
  t.match(migrations.at(-1), { phase: 'Failed', reason: 'Canceled' });
});
