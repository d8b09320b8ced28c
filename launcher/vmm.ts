// Binds vmm/ (validation, disk preparation, domain XML) to this host and
// these directories, in the shape VmManager asks for.
import { prepareDisks, removePreparedDisks, type DiskDirs } from '../vmm/disks/prepare.js';
import { buildDomainXml } from '../vmm/domain/index.js';
import type { Log } from '../vmm/log.js';
import type { HostCaps } from '../vmm/probe/virtualization.js';
import { resolveHostFiles, type HostFilePolicy } from '../vmm/host-files.js';
import { validateVmSpec } from '../vmm/validate.js';
import type { Vmm } from './vm-manager.js';

export function bindVmm(host: HostCaps, dirs: DiskDirs, hostFiles: HostFilePolicy, log: Log): Vmm {
  return {
    validate: validateVmSpec,
    resolveHostFiles: (spec) => resolveHostFiles(spec, hostFiles),
    prepareDisks: (spec) => prepareDisks(spec, dirs, log),
    removeDisks: (spec) => removePreparedDisks(spec, dirs),
    buildDomainXml: (spec, runtime) => buildDomainXml(spec, host, runtime),
  };
}
