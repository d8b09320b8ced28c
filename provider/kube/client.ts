// API handles built from one KubeConfig. Patch helpers set the content type
// explicitly: the generated client defaults to JSON patch otherwise.
import {
  CertificatesV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  KubernetesObjectApi,
  PatchStrategy,
  AuthenticationV1Api,
  AuthorizationV1Api,
  setHeaderOptions,
} from '@kubernetes/client-node';
import { DEFAULT_WATCH_PROGRESS_DEADLINE_MS } from './progress-watch.js';

export interface KubeClients {
  kc: KubeConfig;
  core: CoreV1Api;
  coordination: CoordinationV1Api;
  certificates: CertificatesV1Api;
  authn: AuthenticationV1Api;
  authz: AuthorizationV1Api;
  objects: KubernetesObjectApi;
  custom: CustomObjectsApi;
  /** A watch silent this long is taken for a half-open connection and started again (progress-watch.ts). */
  watchProgressDeadlineMs: number;
}

export function loadKubeConfig(path: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(path);
  return kc;
}

export function makeClients(kc: KubeConfig, opts: { watchProgressDeadlineMs?: number } = {}): KubeClients {
  return {
    kc,
    core: kc.makeApiClient(CoreV1Api),
    coordination: kc.makeApiClient(CoordinationV1Api),
    certificates: kc.makeApiClient(CertificatesV1Api),
    authn: kc.makeApiClient(AuthenticationV1Api),
    authz: kc.makeApiClient(AuthorizationV1Api),
    objects: KubernetesObjectApi.makeApiClient(kc),
    custom: kc.makeApiClient(CustomObjectsApi),
    watchProgressDeadlineMs: opts.watchProgressDeadlineMs ?? DEFAULT_WATCH_PROGRESS_DEADLINE_MS,
  };
}

export const strategicMerge = setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch);
export const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
export const jsonPatch = setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);
