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

export interface KubeClients {
  kc: KubeConfig;
  core: CoreV1Api;
  coordination: CoordinationV1Api;
  certificates: CertificatesV1Api;
  authn: AuthenticationV1Api;
  authz: AuthorizationV1Api;
  objects: KubernetesObjectApi;
  custom: CustomObjectsApi;
}

export function loadKubeConfig(path: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(path);
  return kc;
}

export function makeClients(kc: KubeConfig): KubeClients {
  return {
    kc,
    core: kc.makeApiClient(CoreV1Api),
    coordination: kc.makeApiClient(CoordinationV1Api),
    certificates: kc.makeApiClient(CertificatesV1Api),
    authn: kc.makeApiClient(AuthenticationV1Api),
    authz: kc.makeApiClient(AuthorizationV1Api),
    objects: KubernetesObjectApi.makeApiClient(kc),
    custom: kc.makeApiClient(CustomObjectsApi),
  };
}

export const strategicMerge = setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch);
export const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
export const jsonPatch = setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);
