// The service generated at build time against @grpc/proto-loader's reading of
// launcher.proto, which the launcher and the agent used before: the same
// methods, and every message the same bytes and the same objects both ways.
// A .proto edited without a rebuild fails here too.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';
import t from 'tap';
import { loadLauncherService } from './load.js';

const PROTO = path.join(path.dirname(fileURLToPath(import.meta.url)), 'launcher.proto');
const loaded = protoLoader.loadSync(PROTO, { keepCase: false, longs: Number, enums: String, defaults: true, oneofs: true });
const reference = (
  grpc.loadPackageDefinition(loaded) as unknown as { vkvm: { launcher: { v1: { Launcher: grpc.ServiceClientConstructor } } } }
).vkvm.launcher.v1.Launcher.service;
const reflected = protobuf.loadSync(PROTO).lookupService('vkvm.launcher.v1.Launcher');
reflected.resolveAll();

/** A value for every field (nested messages, repeated, maps, enums, 64-bit, bytes), none of them a default. */
function filled(type: protobuf.Type, depth = 0): Record<string, unknown> {
  const scalar = (f: protobuf.Field | protobuf.MapField, kind: string): unknown => {
    if (f.resolvedType instanceof protobuf.Enum) return Object.keys(f.resolvedType.values).at(-1);
    if (f.resolvedType instanceof protobuf.Type) return depth < 3 ? filled(f.resolvedType, depth + 1) : {};
    if (kind === 'string') return `${f.name}-é`;
    if (kind === 'bool') return true;
    if (kind === 'bytes') return Buffer.from([0, 1, 255]);
    if (/64/.test(kind)) return 1_700_000_000_123;
    if (kind === 'double' || kind === 'float') return 0.5;
    return 7;
  };
  return Object.fromEntries(
    type.fieldsArray.map((f) => {
      if (f instanceof protobuf.MapField) return [f.name, { a: scalar(f, f.type), b: scalar(f, f.type) }];
      const v = scalar(f, f.type);
      return [f.name, f.repeated ? [v, v] : v];
    }),
  );
}

t.test('the generated service has the methods launcher.proto declares, as proto-loader made them', async (t) => {
  const shape = (s: grpc.ServiceDefinition) =>
    Object.fromEntries(Object.entries(s).map(([n, m]) => [n, [m.path, m.requestStream, m.responseStream, m.originalName]]));
  t.same(shape(loadLauncherService().service), shape(reference));
  const client = new (loadLauncherService().Client)('unix:///nonexistent', grpc.credentials.createInsecure()) as unknown as Record<
    string,
    unknown
  >;
  t.teardown(() => (client as unknown as grpc.Client).close());
  t.same([typeof client.syncVm, typeof client.SyncVm], ['function', 'function'], 'the client calls a method by either name');
});

t.test('every message encodes to the same bytes and decodes to the same objects as through proto-loader', async (t) => {
  const service = loadLauncherService().service;
  for (const m of reflected.methodsArray) {
    const ours = service[m.name]!;
    const theirs = reference[m.name]!;
    for (const [side, type] of [
      ['request', m.resolvedRequestType!],
      ['response', m.resolvedResponseType!],
    ] as const) {
      const [serialize, deserialize] =
        side === 'request' ? [ours.requestSerialize, ours.requestDeserialize] : [ours.responseSerialize, ours.responseDeserialize];
      const [refSerialize, refDeserialize] =
        side === 'request' ? [theirs.requestSerialize, theirs.requestDeserialize] : [theirs.responseSerialize, theirs.responseDeserialize];
      const value = filled(type);
      const bytes = serialize(value);
      t.same(bytes, refSerialize(value), `${m.name} ${side}: bytes`);
      t.same(deserialize(bytes), refDeserialize(bytes), `${m.name} ${side}: decoded`);
      t.same(deserialize(Buffer.alloc(0)), refDeserialize(Buffer.alloc(0)), `${m.name} ${side}: defaults`);
    }
  }
});

t.test('a wrongly typed field is refused with its name, as before', async (t) => {
  const syncVm = loadLauncherService().service.SyncVm!;
  t.throws(() => syncVm.responseSerialize({ state: 'running' }), /state: object expected/);
  t.throws(() => syncVm.requestSerialize([]), /expected an object/);
});
