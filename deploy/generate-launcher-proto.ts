// Build step before tsc (npm run build): generates the launcher's gRPC code
// from launcher/proto/launcher.proto, the protocol's one source, into
// launcher/proto/generated/launcher.ts (not in git). A launcher starts per VM,
// and @grpc/proto-loader parsing the .proto and building its reflection,
// encoders and descriptors cost about 27 ms CPU of every start, code cache or
// not (docs/benchmarks-log.md, 2026-11-28). Here protobufjs's own generator
// (pbjs, static-module) writes each message's encode, decode, fromObject and
// toObject as plain code, the same functions proto-loader's reflection builds
// at run time, so the objects on the wire are unchanged; after them, a table
// of the service's methods (launcher/proto/load.ts makes the grpc-js service
// of it).
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';
import { pbjs } from 'protobufjs-cli';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const LAUNCHER_PROTO = path.join(ROOT, 'launcher', 'proto', 'launcher.proto');
export const GENERATED = path.join(ROOT, 'launcher', 'proto', 'generated', 'launcher.ts');
const SERVICE = 'vkvm.launcher.v1.Launcher';

const PBJS_ARGS = [
  ...['--target', 'static-module', '--wrap', 'es6', '--dependency', 'protobufjs/minimal.js'],
  // Its own root, apart from any other generated code's in the process.
  ...['--root', 'vkvm-launcher'],
  // Only what encoding and decoding through plain objects use.
  ...['--no-create', '--no-verify', '--no-delimited', '--no-typeurl', '--no-service', '--no-comments'],
];

// Node's ES modules see no named exports in protobufjs's CommonJS: its module object is the default export.
const NAMESPACE_IMPORT = 'import * as $protobuf from "protobufjs/minimal.js";';
const DEFAULT_IMPORT = 'import $protobuf from "protobufjs/minimal.js";';

function runPbjs(args: string[]): Promise<string> {
  return new Promise((resolve, reject) =>
    pbjs.main(args, (err, output) =>
      err ? reject(err) : output === undefined ? reject(new Error('pbjs wrote nothing')) : resolve(output),
    ),
  );
}

/** The static messages of `protoFile`, then `LAUNCHER_SERVICE`: the service's name and its methods with their message classes. */
export async function generateLauncherProto(protoFile = LAUNCHER_PROTO): Promise<string> {
  const messages = await runPbjs([...PBJS_ARGS, protoFile]);
  if (!messages.includes(NAMESPACE_IMPORT)) throw new Error(`pbjs output no longer starts with ${NAMESPACE_IMPORT}`);
  const service = protobuf.loadSync(protoFile).lookupService(SERVICE);
  service.resolveAll();
  const classOf = (t: protobuf.Type | null): string => t!.fullName.replace(/^\./, '');
  const methods = service.methodsArray.map((m) =>
    [
      `  { name: ${JSON.stringify(m.name)}, request: ${classOf(m.resolvedRequestType)}, response: ${classOf(m.resolvedResponseType)},`,
      ` requestStream: ${Boolean(m.requestStream)}, responseStream: ${Boolean(m.responseStream)} },`,
    ].join(''),
  );
  return [
    '// @ts-nocheck',
    `// Generated from launcher/proto/launcher.proto by deploy/generate-launcher-proto.ts (npm run build): do not edit.`,
    messages.replace(NAMESPACE_IMPORT, DEFAULT_IMPORT),
    `export const LAUNCHER_SERVICE = { name: ${JSON.stringify(SERVICE)}, methods: [`,
    ...methods,
    '] };',
    '',
  ].join('\n');
}

const invokedDirectly = process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) {
  (async () => {
    await mkdir(path.dirname(GENERATED), { recursive: true });
    await writeFile(GENERATED, await generateLauncherProto());
  })().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
