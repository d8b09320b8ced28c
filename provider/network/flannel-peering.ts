// What a vkvm node publishes on its Node so that flannel's nodes route to its
// pod range: flannel's kube subnet manager takes a Node marked as managed,
// with backend type host-gw and a public IP, as a lease for Node.spec.podCIDR
// and routes that range via the IP (pkg/subnet/kube in flannel). vkvm routes
// the other way itself (peer-routes.ts), so the two meet without an overlay.
// Backends that encapsulate (vxlan, wireguard) would need a tunnel endpoint
// vkvm does not run: their nodes ignore a host-gw lease.

/** flannel's default annotation prefix (its --kube-annotation-prefix). */
export const FLANNEL_ANNOTATION_PREFIX = 'flannel.alpha.coreos.com';

/** The annotations of a Node flannel's host-gw backend routes to at `internalIP`. Pure. */
export function flannelHostGwAnnotations(internalIP: string): Record<string, string> {
  return {
    [`${FLANNEL_ANNOTATION_PREFIX}/kube-subnet-manager`]: 'true',
    [`${FLANNEL_ANNOTATION_PREFIX}/backend-type`]: 'host-gw',
    [`${FLANNEL_ANNOTATION_PREFIX}/backend-data`]: 'null',
    [`${FLANNEL_ANNOTATION_PREFIX}/public-ip`]: internalIP,
  };
}
