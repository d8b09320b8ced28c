// Builds a cloud-init NoCloud seed: an ISO 9660 volume labelled "cidata"
// holding user-data, meta-data and optionally network-config, which is how
// cloud-init's NoCloud datasource finds its configuration.
import { mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { run } from '../exec.js';

export interface NoCloudSeed {
  userData: string;
  metaData: string;
  networkConfig?: string;
}

/** Writes the seed ISO to `isoPath`, replacing it atomically; nothing else is left behind. */
export async function buildNoCloudIso(seed: NoCloudSeed, isoPath: string): Promise<void> {
  // Staged next to the target so the final rename stays on one filesystem;
  // mkdtemp's 0700 keeps user-data (which may hold secrets) private meanwhile.
  const staging = await mkdtemp(join(dirname(isoPath), '.cidata-'));
  try {
    const seedDir = join(staging, 'seed');
    await mkdir(seedDir);
    await writeFile(join(seedDir, 'user-data'), seed.userData);
    await writeFile(join(seedDir, 'meta-data'), seed.metaData);
    if (seed.networkConfig !== undefined) await writeFile(join(seedDir, 'network-config'), seed.networkConfig);
    const partial = join(staging, 'seed.iso');
    await run('genisoimage', ['-output', partial, '-volid', 'cidata', '-joliet', '-rock', seedDir]);
    await rename(partial, isoPath);
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}
