// Loads csi.proto (the CSI spec v1.13.0, github.com/container-storage-interface/spec) and the kubelet's
// pluginregistration.proto (k8s.io/kubelet/pkg/apis/pluginregistration/v1/api.proto) at run time with
// @grpc/proto-loader, as launcher/proto does for the launcher's protocol.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

// tsc does not copy .proto files: from dist/provider/csi/ the source tree's copy is three levels up.
const here = path.dirname(fileURLToPath(import.meta.url));
function protoPath(file: string): string {
  const candidates = [path.join(here, 'proto', file), path.resolve(here, '../../../provider/csi/proto', file)];
  return candidates.find((p) => existsSync(p)) ?? candidates[0]!;
}
export const CSI_PROTO_PATH = protoPath('csi.proto');
export const REGISTRATION_PROTO_PATH = protoPath('pluginregistration.proto');

/** camelCase fields, enums by name, int64 as number (bytes below 2^53), oneofs named. */
const LOADER_OPTIONS: protoLoader.Options = { keepCase: false, longs: Number, enums: String, defaults: true, oneofs: true };

export type CsiServiceName = 'Identity' | 'Controller' | 'Node';

export function loadCsiServices(): Record<CsiServiceName, grpc.ServiceClientConstructor> {
  const def = protoLoader.loadSync(CSI_PROTO_PATH, LOADER_OPTIONS);
  const pkg = grpc.loadPackageDefinition(def) as unknown as { csi: { v1: Record<CsiServiceName, grpc.ServiceClientConstructor> } };
  return { Identity: pkg.csi.v1.Identity, Controller: pkg.csi.v1.Controller, Node: pkg.csi.v1.Node };
}

/** The kubelet's plugin registration service (package `pluginregistration`, its v1). */
export function loadRegistrationService(): grpc.ServiceClientConstructor {
  const def = protoLoader.loadSync(REGISTRATION_PROTO_PATH, LOADER_OPTIONS);
  const pkg = grpc.loadPackageDefinition(def) as unknown as { pluginregistration: { Registration: grpc.ServiceClientConstructor } };
  return pkg.pluginregistration.Registration;
}
