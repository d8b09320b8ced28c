// The destination XML of a live migration: the source's migratable domain XML
// (same ABI: devices, PCI addresses, CPU model) with only the host-side paths
// rewritten to where the target launcher prepared them. libvirt's ABI check
// refuses anything else, so nothing else changes. Works on libvirt's own
// formatting (one element per line, single-quoted attributes) rather than a
// parse/build round trip, which would regroup elements and reorder devices.

/** Where the target launcher put each host-side file and socket (PrepareIncoming's answer). */
export interface IncomingPaths {
  /** Host path of each disk, keyed by the spec's disk name (the domain's `ua-disk-<name>` alias). */
  diskPaths: Record<string, string>;
  consoleSocket: string;
  /** Empty when the VM has no guest agent channel. */
  agentSocket: string;
  /** Empty when the VM has no display. */
  vncSocket: string;
  /** Empty for BIOS guests. */
  nvramPath: string;
  /** `kernel`, `initrd` for kernel boot; empty otherwise. */
  bootPaths: Record<string, string>;
}

/** A field of IncomingPaths the source XML needs but the target did not give. */
export class MigrationXmlError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
    this.name = 'MigrationXmlError';
  }
}

const attr = (v: string): string => v.replace(/&/g, '&amp;').replace(/'/g, '&apos;').replace(/</g, '&lt;');

/** Replaces every match of `re` (global) with what `fn` returns for it. */
const each = (xml: string, re: RegExp, fn: (block: string) => string): string => xml.replace(re, (block) => fn(block));

const BACKING_STORE = /\s*<backingStore\b[\s\S]*<\/backingStore>|\s*<backingStore\/>/;

function rewriteDisk(block: string, paths: IncomingPaths): string {
  const name = /<alias name='ua-disk-([^']+)'\/>/.exec(block)?.[1];
  if (name === undefined) return block;
  const target = paths.diskPaths[name];
  if (target === undefined) throw new MigrationXmlError(`diskPaths.${name}`, `the target prepared no file for disk ${name}`);
  // The first <source> is the disk's own; the backing chain is the target's to probe from its own image store.
  return block.replace(BACKING_STORE, '').replace(/<source file='[^']*'/, `<source file='${attr(target)}'`);
}

function required(value: string, field: string, what: string): string {
  if (!value) throw new MigrationXmlError(field, `the source domain has ${what}, but the target gave no path for it`);
  return attr(value);
}

/** The XML the target libvirt defines the incoming domain from. Pure; MigrationXmlError names a missing path. */
export function toTargetXml(sourceXml: string, paths: IncomingPaths): string {
  let xml = each(sourceXml, /<disk\b[\s\S]*?<\/disk>/g, (b) => rewriteDisk(b, paths));
  xml = each(xml, /<(serial|console)\b[\s\S]*?<\/\1>/g, (b) =>
    b.replace(/(<source mode='bind' path=')[^']*'/, `$1${required(paths.consoleSocket, 'consoleSocket', 'a serial console')}'`),
  );
  xml = each(xml, /<channel\b[\s\S]*?<\/channel>/g, (b) =>
    b.includes("name='org.qemu.guest_agent.0'")
      ? b.replace(/(<source mode='bind' path=')[^']*'/, `$1${required(paths.agentSocket, 'agentSocket', 'a guest agent channel')}'`)
      : b,
  );
  xml = each(xml, /<graphics type='vnc'[\s\S]*?(?:<\/graphics>|\/>)/g, (b) =>
    b.replace(/socket='[^']*'/g, `socket='${required(paths.vncSocket, 'vncSocket', 'a VNC display')}'`),
  );
  xml = xml.replace(/(<nvram\b[^>]*>)[^<]*(<\/nvram>)/, (_, open: string, close: string) => {
    return `${open}${required(paths.nvramPath, 'nvramPath', 'UEFI variables')}${close}`;
  });
  for (const element of ['kernel', 'initrd']) {
    xml = xml.replace(new RegExp(`(<${element}>)[^<]*(</${element}>)`), (_, open: string, close: string) => {
      return `${open}${required(paths.bootPaths[element] ?? '', `bootPaths.${element}`, `a ${element}`)}${close}`;
    });
  }
  return xml;
}

/** Target devs of the disks libvirt must copy: writable file disks (containerDisk overlays, emptyDisks). */
export function disksToCopy(sourceXml: string): string[] {
  const devs: string[] = [];
  for (const [block] of sourceXml.matchAll(/<disk type='file' device='disk'[\s\S]*?<\/disk>/g)) {
    if (/<readonly\/>|<shareable\/>/.test(block)) continue;
    const dev = /<target dev='([^']+)'/.exec(block)?.[1];
    if (dev) devs.push(dev);
  }
  return devs;
}
