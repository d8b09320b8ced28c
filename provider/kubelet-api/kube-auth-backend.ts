// AuthBackend over the real TokenReview and SubjectAccessReview APIs.
import type { KubeClients } from '../kube/client.js';
import type { AuthBackend } from './auth.js';

export function kubeAuthBackend(clients: KubeClients): AuthBackend {
  return {
    async reviewToken(token) {
      const review = await clients.authn.createTokenReview({
        body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token } },
      });
      const u = review.status?.user;
      if (!review.status?.authenticated || !u?.username) return null;
      return { username: u.username, uid: u.uid, groups: u.groups ?? [], extra: u.extra };
    },
    async authorize(user, attrs) {
      const review = await clients.authz.createSubjectAccessReview({
        body: {
          apiVersion: 'authorization.k8s.io/v1',
          kind: 'SubjectAccessReview',
          spec: {
            user: user.username,
            uid: user.uid,
            groups: user.groups,
            extra: user.extra,
            resourceAttributes: attrs,
          },
        },
      });
      return { allowed: review.status?.allowed === true, reason: review.status?.reason };
    },
  };
}
