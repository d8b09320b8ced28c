// Loads launcher.proto at run time with @grpc/proto-loader (no generated code).
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

// tsc does not copy .proto files: from dist/launcher/proto/ the source tree's
// copy is three levels up.
const here = path.dirname(fileURLToPath(import.meta.url));
const candidates = [path.join(here, 'launcher.proto'), path.resolve(here, '../../../launcher/proto/launcher.proto')];

export const PROTO_PATH = candidates.find((p) => existsSync(p)) ?? candidates[0]!;

/** camelCase fields, enums as their names, int64 as number (Unix ms fit), defaults filled in. */
export const LOADER_OPTIONS: protoLoader.Options = { keepCase: false, longs: Number, enums: String, defaults: true, oneofs: true };

type ClientConstructor = new (address: string, credentials: grpc.ChannelCredentials, options?: grpc.ChannelOptions) => grpc.Client;

let loaded: { service: grpc.ServiceDefinition; Client: ClientConstructor } | undefined;

/**
 * The service and its client class, parsed once per process: the agent
 * connects to every launcher, and parsing the .proto with its generated
 * (de)serializers for each would cost CPU and memory per VM.
 */
export function loadLauncherService(): { service: grpc.ServiceDefinition; Client: ClientConstructor } {
  if (loaded) return loaded;
  const def = protoLoader.loadSync(PROTO_PATH, LOADER_OPTIONS);
  const pkg = grpc.loadPackageDefinition(def) as unknown as { vkvm: { launcher: { v1: { Launcher: grpc.ServiceClientConstructor } } } };
  const Launcher = pkg.vkvm.launcher.v1.Launcher;
  loaded = { service: Launcher.service, Client: Launcher };
  return loaded;
}
