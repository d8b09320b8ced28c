import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { dumpYaml } from '@kubernetes/client-node';
import t from 'tap';
import { parse, parseAllDocuments } from 'yaml';
import { readManifests } from '../provider/kube/apply.js';
import { packageRoot } from '../provider/package-root.js';
import type { JsonSchema } from './schema.js';
import { allCrds } from './kubevirt.js';
import { HEADER, renderCrdFiles } from './render.js';

const root = packageRoot();

t.test('the checked-in CRD manifests are what the generator writes (run `npm run crds` after changing crds/*.ts)', async (t) => {
  const expected = renderCrdFiles();
  const actual = new Map<string, string>();
  for (const path of expected.keys()) actual.set(path, await readFile(join(root, path), 'utf8').catch(() => '<missing>'));
  t.same(Object.fromEntries(actual), Object.fromEntries(expected), 'checked-in files match the generator output');
});

t.test(
  'deploy/crds.yaml and deploy/cdi-crds.yaml together hold every CRD vkvm up installs from crds/, behind the generated header',
  async (t) => {
    const files = renderCrdFiles();
    const docs = (path: string) => parseAllDocuments(files.get(path)!).map((d) => d.toJS());
    const fromCrdsDir = [...files].filter(([p]) => p.startsWith('crds/')).map(([, c]) => parseAllDocuments(c)[0]!.toJS());
    t.ok(files.get('deploy/crds.yaml')!.startsWith(HEADER) && files.get('deploy/cdi-crds.yaml')!.startsWith(HEADER), 'header first');
    t.same([...docs('deploy/crds.yaml'), ...docs('deploy/cdi-crds.yaml')], fromCrdsDir);
    t.same(
      docs('deploy/cdi-crds.yaml').map((c) => c.metadata.name),
      ['datavolumes.cdi.kubevirt.io'],
      "CDI's DataVolume is in a bundle of its own, applied only where CDI is not installed",
    );
  },
);

t.test(
  'vkvm up sends the CRDs as written: client-node serialises what readManifests returns without losing x-kubernetes-* fields',
  async (t) => {
    for (const path of [...renderCrdFiles().keys()].filter((p) => p.startsWith('crds/'))) {
      const written = parseAllDocuments(await readFile(join(root, path), 'utf8')).map((d) => d.toJS());
      // dumpYaml serialises as KubernetesObjectApi.patch does.
      const sent = (await readManifests(join(root, path))).map((o) => parse(dumpYaml(o)));
      t.same(sent, written, path);
    }
  },
);

/** Every CEL rule in a schema, with the schema path it sits on. */
function rulesOf(schema: JsonSchema, at = ''): Array<{ at: string; message: string; fieldPath?: string }> {
  const found = (schema['x-kubernetes-validations'] ?? []).map((r) => ({
    at,
    message: r.message,
    ...(r.fieldPath ? { fieldPath: r.fieldPath } : {}),
  }));
  for (const [k, v] of Object.entries(schema.properties ?? {})) found.push(...rulesOf(v, `${at}.${k}`));
  if (schema.items) found.push(...rulesOf(schema.items, `${at}[]`));
  return found;
}

t.test('every CEL rule message names the field it rejects, by its full path', async (t) => {
  for (const crd of allCrds()) {
    for (const r of rulesOf(crd.spec.versions[0]!.schema.openAPIV3Schema)) {
      // A rule on `.spec.template.spec` with fieldPath `.volumes` rejects `spec.template.spec.volumes`.
      const field = (r.at + (r.fieldPath ?? '')).slice(1);
      t.ok(r.message.includes(field), `${crd.spec.names.kind}: "${r.message}" names ${field}`);
    }
  }
});
