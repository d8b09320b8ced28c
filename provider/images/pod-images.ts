// The pull step between a pod's VmSpec and its launcher, as the kubelet pulls
// a pod's images before it starts its containers: every registry source in
// the spec (a containerDisk, a kernel-boot image) is pulled with the pod's
// pull secrets and policy, the files the VM needs are taken out into the
// image store, and the spec the launcher gets names those files, marked
// `fromImageStore` — the one place that marker is ever set. Events are the
// kubelet's: Pulling, Pulled (with duration and size, or "already present").
// The pod pins its images before anything is pulled (pins.ts), so garbage
// collection leaves them alone from then until the pod is gone.
import type { V1Pod } from '@kubernetes/client-node';
import type { EventRecorder } from '../kube/events.js';
import { isNotFound } from '../kube/errors.js';
import type { Logger } from '../log.js';
import type { DiskSpec, ImagePullPolicy, KernelBoot, VmSpec } from '../../vmm/spec.js';
import type { ImageService, ReadyImage } from './image-service.js';
import { keyringFromSecrets, type DockerKeyring, type PullSecret, type RegistryCredential } from './keyring.js';
import type { PinStore } from './pins.js';
import { defaultPullPolicy, parseReference } from './reference.js';

export interface PodImagesOptions {
  images: ImageService;
  pins: Pick<PinStore, 'pin'>;
  /** A Secret of the pod's namespace, undefined when it does not exist. */
  readSecret: (namespace: string, name: string) => Promise<PullSecret | undefined>;
  events: EventRecorder;
}

export interface ResolvedSpec {
  /** The spec with every registry source replaced by files in the image store. */
  spec: VmSpec;
  /** The pod's container image as pulled (repository@digest), when it is a registry image. */
  imageID?: string;
  /** Whether the spec named registry images (their events are this step's). */
  fromRegistry: boolean;
}

interface Wanted {
  image: string;
  pullPolicy: ImagePullPolicy;
}

/** The registry images a spec names, each once. */
function registryImages(spec: VmSpec): Wanted[] {
  const all: Wanted[] = [
    ...spec.disks.flatMap((d) => (d.source.kind === 'registry' ? [{ image: d.source.image, pullPolicy: d.source.pullPolicy }] : [])),
    ...(spec.kernelBoot?.container ? [spec.kernelBoot.container] : []),
  ];
  return all.filter((w, i) => all.findIndex((o) => o.image === w.image) === i);
}

export class PodImages {
  constructor(private readonly o: PodImagesOptions) {}

  /**
   * Pulls what the spec names, as its pull policies say, for a VM about to
   * start. Failures are ImagePullErrors with the kubelet's reasons.
   */
  async resolve(pod: V1Pod, spec: VmSpec, log: Logger): Promise<ResolvedSpec> {
    const wanted = registryImages(spec);
    if (!wanted.length) return { spec, fromRegistry: false };
    const pin = {
      uid: pod.metadata?.uid ?? '',
      pod: `${pod.metadata?.namespace ?? ''}/${pod.metadata?.name ?? ''}`,
      references: wanted.map((w) => w.image),
    };
    await this.o.pins.pin({ ...pin, imageIds: [] });
    const keyring = await this.keyringOf(pod, log);
    const ready = new Map<string, ReadyImage>();
    for (const w of wanted) {
      const t0 = performance.now();
      const image = await this.o.images.ensure({
        image: w.image,
        policy: w.pullPolicy,
        keyring,
        onPulling: () => this.o.events.record(pod, 'Normal', 'Pulling', `Pulling image "${w.image}"`),
        log,
      });
      const s = ((performance.now() - t0) / 1000).toFixed(3);
      this.o.events.record(
        pod,
        'Normal',
        'Pulled',
        image.pulled
          ? `Successfully pulled image "${w.image}" in ${s}s. Image size: ${image.sizeBytes} bytes.`
          : `Container image "${w.image}" already present on machine`,
      );
      ready.set(w.image, image);
    }
    await this.o.pins.pin({ ...pin, imageIds: [...ready.values()].map((i) => i.imageID) });
    const own = ready.get(pod.spec?.containers?.[0]?.image ?? '') ?? [...ready.values()][0];
    return { spec: await this.withStoreFiles(spec, ready), fromRegistry: true, ...(own ? { imageID: own.imageID } : {}) };
  }

  /**
   * The spec a running VM was started with, from the store alone: for
   * re-sending a spec to its launcher, never a reason to ask a registry.
   */
  async resolveRunning(spec: VmSpec): Promise<VmSpec> {
    const wanted = registryImages(spec);
    if (!wanted.length) return spec;
    const ready = new Map<string, ReadyImage>();
    for (const w of wanted) ready.set(w.image, await this.o.images.ensure({ image: w.image, policy: 'Never', alreadyAuthorized: true }));
    return this.withStoreFiles(spec, ready);
  }

  private async withStoreFiles(spec: VmSpec, ready: Map<string, ReadyImage>): Promise<VmSpec> {
    const disks = await Promise.all(
      spec.disks.map(async (d): Promise<DiskSpec> => {
        if (d.source.kind !== 'registry') return d;
        const [path] = await this.o.images.files(
          ready.get(d.source.image)!,
          [d.source.path ? { path: d.source.path } : { onlyIn: '/disk' }],
          { disk: true },
        );
        return { ...d, source: { kind: 'image', path: path!, fromImageStore: true } };
      }),
    );
    let kernelBoot = spec.kernelBoot;
    if (kernelBoot?.container) {
      const { container, ...rest } = kernelBoot;
      const [kernelPath, initrdPath] = await this.o.images.files(
        ready.get(container.image)!,
        [{ path: kernelBoot.kernelPath }, ...(kernelBoot.initrdPath ? [{ path: kernelBoot.initrdPath }] : [])],
        { disk: false },
      );
      kernelBoot = { ...rest, kernelPath: kernelPath!, ...(initrdPath ? { initrdPath } : {}), fromImageStore: true } satisfies KernelBoot;
    }
    return { ...spec, disks, ...(kernelBoot ? { kernelBoot } : {}) };
  }

  /**
   * The disk file of a registry image, as a containerDisk's (`/disk/*`), for
   * a DataVolume import into one of the pod's claims: the pod's pull secrets
   * and `extra` (the import's own secret), the image's default pull policy.
   * Failures are ImagePullErrors.
   */
  async diskFile(pod: V1Pod, image: string, extra: RegistryCredential | undefined, log: Logger): Promise<string> {
    const keyring = await this.keyringOf(pod, log);
    // Its credential first: the keyring returns the most specific key first, and repository beats host.
    if (extra) {
      const ref = parseReference(image);
      keyring.add(`${ref.domain}/${ref.path}`, extra);
    }
    const ready = await this.o.images.ensure({ image, policy: defaultPullPolicy(image), keyring, log });
    const [path] = await this.o.images.files(ready, [{ onlyIn: '/disk' }], { disk: true });
    return path!;
  }

  /**
   * The pod's pull secrets as one keyring. One the node cannot read is
   * skipped with a warning, as the kubelet does; the pull may still work.
   */
  private async keyringOf(pod: V1Pod, log: Logger): Promise<DockerKeyring> {
    const namespace = pod.metadata?.namespace ?? 'default';
    const secrets: PullSecret[] = [];
    for (const ref of pod.spec?.imagePullSecrets ?? []) {
      if (!ref.name) continue;
      try {
        const secret = await this.o.readSecret(namespace, ref.name);
        if (secret) secrets.push(secret);
        else log.warn({ secret: `${namespace}/${ref.name}` }, 'pull secret not found; the image pull may not succeed');
      } catch (err) {
        log.warn({ err, secret: `${namespace}/${ref.name}` }, 'could not read a pull secret; the image pull may not succeed');
      }
    }
    return keyringFromSecrets(secrets);
  }
}

/** readSecret for PodImagesOptions, over the node's client (the Node authorizer lets it read its pods' pull secrets). */
export function secretReader(
  readNamespacedSecret: (req: { name: string; namespace: string }) => Promise<{ type?: string; data?: Record<string, string> }>,
) {
  return async (namespace: string, name: string): Promise<PullSecret | undefined> => {
    try {
      const s = await readNamespacedSecret({ name, namespace });
      return { namespace, name, ...(s.type ? { type: s.type } : {}), ...(s.data ? { data: s.data } : {}) };
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  };
}
