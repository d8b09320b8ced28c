// Built-in kernel-boot images the agent provides itself. Today that is the
// test guest (Debian kernel + busybox initramfs, built from the host's Debian
// packages by vmm/guest/build.ts), which the quickstart example runs. It is
// built on first use and cached; a failed build is retried on the next sync.
import type { V1Pod } from '@kubernetes/client-node';
import type { Logger } from '../log.js';
import { ensureTestGuest } from '../../vmm/guest/build.js';
import { parseImage, TEST_GUEST_IMAGE, type BuiltinImages } from '../vm-identity.js';

export interface BuiltinImageResolver {
  /** The built-in images among `names` (unknown names are left out; translation reports them). */
  byName(names: string[]): Promise<BuiltinImages>;
  /** The built-in image a plain pod boots, if any. */
  forPod(pod: V1Pod): Promise<BuiltinImages>;
}

export function builtinImageResolver(log: Logger): BuiltinImageResolver {
  let testGuest: Promise<BuiltinImages> | undefined;
  const byName = async (names: string[]): Promise<BuiltinImages> => {
    if (!names.includes(TEST_GUEST_IMAGE)) return {};
    testGuest ??= ensureTestGuest({ log: (msg) => log.info({ image: TEST_GUEST_IMAGE }, msg) }).then(
      (g): BuiltinImages => ({ [TEST_GUEST_IMAGE]: { kernelPath: g.kernelPath, initrdPath: g.initrdPath, cmdline: g.cmdline } }),
      (err: unknown) => {
        testGuest = undefined;
        throw err;
      },
    );
    return testGuest;
  };
  return {
    byName,
    forPod: async (pod) => {
      const source = parseImage(pod.spec?.containers?.[0]?.image ?? '');
      return source?.kind === 'builtin' ? byName([source.name]) : {};
    },
  };
}
