// Error kinds of image pulls. The pod status shows `reason` as the kubelet
// does (a waiting container's reason); RegistryError says what the registry
// answered, in words a user can act on, and becomes part of the message.

/** The waiting reasons a failed pull shows; ImagePullBackOff is derived by the caller while it backs off. */
export type ImagePullReason = 'ErrImagePull' | 'ErrImageNeverPull' | 'InvalidImageName';
export type ImageErrorReason = ImagePullReason | 'ImagePullBackOff';

/** A pod's image could not be made ready; retried with back-off. */
export class ImagePullError extends Error {
  readonly kind = 'ImagePullError';
  constructor(
    readonly reason: ImagePullReason,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'ImagePullError';
  }
}

/** What went wrong talking to a registry, as the user should read it first. */
export type RegistryProblem =
  'unauthorized' | 'denied' | 'not found' | 'unreachable' | 'too many requests' | 'registry error' | 'invalid response';

export class RegistryError extends Error {
  readonly kind = 'RegistryError';
  constructor(
    readonly problem: RegistryProblem,
    message: string,
    readonly status?: number,
    options?: ErrorOptions,
  ) {
    super(`${problem}: ${message}`, options);
    this.name = 'RegistryError';
  }
}

/**
 * The image's content is not what it claims or not what vkvm can use: a blob
 * or manifest whose digest or size does not match, a schema1 manifest, no
 * disk where KubeVirt looks for one. Nothing of it is kept.
 */
export class ImageContentError extends Error {
  readonly kind = 'ImageContentError';
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'ImageContentError';
  }
}
