// The subresource API's two reads of the cluster's own configuration: the
// aggregator's requestheader settings, which kube-apiserver publishes in
// kube-system/extension-apiserver-authentication, and SubjectAccessReview.
import type { KubeClients } from '../kube/client.js';
import type { Authorizer, RequestHeaderConfig } from './auth.js';
import { GROUP, VERSION } from './auth.js';

export const AUTHENTICATION_CONFIGMAP = { namespace: 'kube-system', name: 'extension-apiserver-authentication' } as const;

const list = (value: string | undefined): string[] => {
  if (!value) return [];
  const parsed: unknown = JSON.parse(value);
  return Array.isArray(parsed) ? parsed.filter((v): v is string => typeof v === 'string') : [];
};

/** Throws when the cluster has no front proxy configured: no request could then be authenticated. */
export async function readRequestHeaderConfig(clients: KubeClients): Promise<RequestHeaderConfig> {
  const cm = await clients.core.readNamespacedConfigMap(AUTHENTICATION_CONFIGMAP);
  const data = cm.data ?? {};
  const clientCaPem = data['requestheader-client-ca-file'];
  if (!clientCaPem) {
    throw new Error(
      `${AUTHENTICATION_CONFIGMAP.namespace}/${AUTHENTICATION_CONFIGMAP.name} has no requestheader-client-ca-file: start kube-apiserver with --requestheader-client-ca-file and --proxy-client-cert-file (the aggregation layer)`,
    );
  }
  return {
    clientCaPem,
    allowedNames: list(data['requestheader-allowed-names']),
    usernameHeaders: list(data['requestheader-username-headers']),
    groupHeaders: list(data['requestheader-group-headers']),
    extraHeaderPrefixes: list(data['requestheader-extra-headers-prefix']),
  };
}

export function subjectAccessReviewer(clients: KubeClients): Authorizer {
  return {
    async authorize(user, attrs) {
      const review = await clients.authz.createSubjectAccessReview({
        body: {
          apiVersion: 'authorization.k8s.io/v1',
          kind: 'SubjectAccessReview',
          spec: {
            user: user.username,
            groups: user.groups,
            ...(user.extra ? { extra: user.extra } : {}),
            resourceAttributes: { group: GROUP, version: VERSION, ...attrs },
          },
        },
      });
      return { allowed: review.status?.allowed === true, ...(review.status?.reason ? { reason: review.status.reason } : {}) };
    },
  };
}
