// The launcher's gRPC service from code generated out of launcher.proto at
// build time (deploy/generate-launcher-proto.ts): no .proto is parsed and no
// encoder is built at run time, which cost a launcher about 27 ms CPU per
// start with @grpc/proto-loader. Messages cross the wire as proto-loader
// delivered them (WIRE_OPTIONS), so launcher/proto/types.ts describes both.
import * as grpc from '@grpc/grpc-js';
import type { IConversionOptions, Writer } from 'protobufjs';
import { LAUNCHER_SERVICE } from './generated/launcher.js';

/** camelCase fields (the generator's default), enums as their names, int64 as number (Unix ms fit), defaults filled in. */
export const WIRE_OPTIONS: IConversionOptions = { longs: Number, enums: String, defaults: true, oneofs: true };

/** What the service uses of a message class pbjs generated. */
interface MessageClass {
  encode(message: object): Writer;
  decode(bytes: Uint8Array): object;
  fromObject(object: object): object;
  toObject(message: object, options: IConversionOptions): object;
}

interface GeneratedMethod {
  name: string;
  request: MessageClass;
  response: MessageClass;
  requestStream: boolean;
  responseStream: boolean;
}

// The generated file is untyped (pbjs writes JavaScript); its shape is typed here, once.
const generated: { name: string; methods: readonly GeneratedMethod[] } = LAUNCHER_SERVICE;

// As proto-loader's: fromObject rejects a wrongly typed field with a message naming it.
const serializer = (c: MessageClass) => (value: object) => {
  if (Array.isArray(value)) throw new Error('Failed to serialize message: expected an object, got an array');
  const bytes = c.encode(c.fromObject(value)).finish();
  // protobufjs writes Buffers under Node already.
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes);
};
const deserializer = (c: MessageClass) => (bytes: Buffer) => c.toObject(c.decode(bytes), WIRE_OPTIONS);

type ClientConstructor = new (address: string, credentials: grpc.ChannelCredentials, options?: grpc.ChannelOptions) => grpc.Client;

let loaded: { service: grpc.ServiceDefinition; Client: ClientConstructor } | undefined;

/** The service and its client class, made once per process (the agent connects to every launcher). */
export function loadLauncherService(): { service: grpc.ServiceDefinition; Client: ClientConstructor } {
  if (loaded) return loaded;
  const service: grpc.ServiceDefinition = Object.fromEntries(
    generated.methods.map((m) => [
      m.name,
      {
        path: `/${generated.name}/${m.name}`,
        requestStream: m.requestStream,
        responseStream: m.responseStream,
        requestSerialize: serializer(m.request),
        requestDeserialize: deserializer(m.request),
        responseSerialize: serializer(m.response),
        responseDeserialize: deserializer(m.response),
        // The client's lower-camel alias (client.syncVm), as proto-loader names it.
        originalName: m.name.charAt(0).toLowerCase() + m.name.slice(1),
      },
    ]),
  );
  loaded = { service, Client: grpc.makeGenericClientConstructor(service, 'Launcher') };
  return loaded;
}
