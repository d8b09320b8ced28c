// Domain XML from an ordered list of section builders, as KubeVirt's
// converter does. Each builder owns one section; the order here is the order
// they run, while the XML's element order is fixed by newDomainDraft.
import type { VmSpec } from '../spec.js';
import type { HostCaps } from '../probe/virtualization.js';
import type { DomainRuntime } from './runtime.js';
import { newDomainDraft, type DomainBuilder, type DomainDraft } from './draft.js';
import { serializeDomain } from './xml.js';
import { configureAccel } from './accel.js';
import { configureMemory } from './memory.js';
import { configureCpu } from './cpu.js';
import { configureIoThreads } from './iothreads.js';
import { configureOs } from './os.js';
import { configureFeatures } from './features.js';
import { configureClock } from './clock.js';
import { configureLifecycle } from './lifecycle.js';
import { configureDisks } from './disks.js';
import { configureNet } from './net.js';
import { configureSerial } from './serial.js';
import { configureChannels } from './channels.js';
import { configureGraphics } from './graphics.js';

const DOMAIN_BUILDERS: readonly DomainBuilder[] = [
  configureAccel,
  configureMemory,
  configureCpu,
  configureIoThreads,
  configureOs,
  configureFeatures,
  configureClock,
  configureLifecycle,
  configureDisks,
  configureNet,
  configureSerial,
  configureChannels,
  configureGraphics,
];

/** Runs every builder on a fresh draft. Expects a spec that passed validateVmSpec. */
function buildDomain(spec: VmSpec, host: HostCaps, runtime: DomainRuntime): DomainDraft {
  const draft = newDomainDraft(spec, runtime);
  for (const configure of DOMAIN_BUILDERS) configure(spec, host, runtime, draft);
  return draft;
}

export function buildDomainXml(spec: VmSpec, host: HostCaps, runtime: DomainRuntime): string {
  return serializeDomain(buildDomain(spec, host, runtime));
}
