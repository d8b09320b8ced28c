import t from 'tap';
import { launcherArgv, parseLauncherArgs } from './args.js';

t.test('launcherArgv and parseLauncherArgs round-trip', async (t) => {
  const hostFiles = { imageDirs: ['/srv/images'], hostDiskDirs: [], deniedDirs: ['/var/lib/vkvm'], imageStoreDir: '/var/lib/vkvm/images' };
  const argv = launcherArgv({
    uid: 'abc-1',
    runDir: '/run/vkvm/abc-1',
    cgroupParent: 'kubepods/vkvm',
    allowSoftwareEmulation: false,
    hostFiles,
    volumeDirs: [
      { path: '/srv/pv/a', readOnly: false },
      { path: '/srv/pv/b', readOnly: true },
      { path: '/var/lib/vkvm/pods/p/volumeDevices/kubernetes.io~csi/c', readOnly: false, device: true },
      { path: '/var/lib/vkvm/pods/p/volumeDevices/kubernetes.io~csi/d', readOnly: true, device: true },
    ],
  });
  t.match(parseLauncherArgs(argv), {
    uid: 'abc-1',
    runDir: '/run/vkvm/abc-1',
    socket: '/run/vkvm/abc-1/launcher.sock',
    cgroupParent: 'kubepods/vkvm',
    allowSoftwareEmulation: false,
    consoleLogMaxBytes: 10 * 1024 * 1024,
    hostFiles,
    volumeDirs: [
      { path: '/srv/pv/a', readOnly: false },
      { path: '/srv/pv/b', readOnly: true },
      { path: '/var/lib/vkvm/pods/p/volumeDevices/kubernetes.io~csi/c', readOnly: false, device: true },
      { path: '/var/lib/vkvm/pods/p/volumeDevices/kubernetes.io~csi/d', readOnly: true, device: true },
    ],
  });
});

t.test('parseLauncherArgs refuses what cannot work', async (t) => {
  t.throws(() => parseLauncherArgs(['--run-dir', '/x']), /--uid is required/);
  t.throws(() => parseLauncherArgs(['--uid', '../etc', '--run-dir', '/x']), /--uid is required/, 'uid becomes a path component');
  t.throws(() => parseLauncherArgs(['--uid', 'a', '--run-dir', '/' + 'x'.repeat(100)]), /longer than 107 bytes/);
  t.throws(() => parseLauncherArgs(['--uid', 'a', '--run-dir', '/x', '--bogus']), /Unknown option/);
});
