import t from 'tap';
import type { ImportPhase } from '../kubevirt/datavolume-annotations.js';
import {
  decideImport,
  importPercent,
  lastProgress,
  ProgressThrottle,
  readOnlyField,
  sizeRefusal,
  stagingOf,
  type ImportDecision,
} from './import-plan.js';

const SRC = 'cdi.kubevirt.io/storage.import.source';
const END = 'cdi.kubevirt.io/storage.import.endpoint';
const SECRET = 'cdi.kubevirt.io/storage.import.secretName';

t.test('decideImport: what a claim needs before its VM boots', async (t) => {
  const http = { [SRC]: 'http', [END]: 'https://img.example/disk.qcow2' };
  const registry = { [SRC]: 'registry', [END]: 'docker://127.0.0.1:5000/guest:v1' };
  const cases: [
    string,
    Record<string, string> | undefined,
    ImportPhase | undefined,
    boolean,
    ImportDecision | { kind: 'invalid'; message: RegExp },
  ][] = [
    ['no annotations: a plain claim', undefined, undefined, false, { kind: 'none' }],
    ['blank DataVolume', { [SRC]: 'none' }, undefined, false, { kind: 'none' }],
    ['http, not imported yet', http, undefined, false, { kind: 'import', source: { kind: 'http', url: 'https://img.example/disk.qcow2' } }],
    [
      'http, a killed import reported Running: again',
      http,
      'Running',
      false,
      { kind: 'import', source: { kind: 'http', url: 'https://img.example/disk.qcow2' } },
    ],
    [
      'a failed import is retried',
      http,
      'Failed',
      false,
      { kind: 'import', source: { kind: 'http', url: 'https://img.example/disk.qcow2' } },
    ],
    [
      'registry with a secret',
      { ...registry, [SECRET]: 'creds' },
      undefined,
      false,
      { kind: 'import', source: { kind: 'registry', image: '127.0.0.1:5000/guest:v1', secretName: 'creds' } },
    ],
    ['marker present, report still Running: report Succeeded', http, 'Running', true, { kind: 'done', report: true }],
    ['marker present, reported: nothing to do', registry, 'Succeeded', true, { kind: 'done', report: false }],
    [
      'marker wins over a bad endpoint (imported before it changed)',
      { [SRC]: 'http', [END]: 'nonsense' },
      undefined,
      true,
      { kind: 'done', report: true },
    ],
    [
      'http endpoint not a URL',
      { [SRC]: 'http', [END]: 'nonsense' },
      undefined,
      false,
      { kind: 'invalid', message: /^cdi\.kubevirt\.io\/storage\.import\.endpoint: "nonsense" is not a URL/ },
    ],
    [
      'http endpoint of another scheme',
      { [SRC]: 'http', [END]: 'file:///etc/shadow' },
      undefined,
      false,
      { kind: 'invalid', message: /storage\.import\.endpoint: .*not file:/ },
    ],
    [
      'registry endpoint without docker://',
      { [SRC]: 'registry', [END]: 'r/i:1' },
      undefined,
      false,
      { kind: 'invalid', message: /storage\.import\.endpoint: a registry source is docker:\/\/<image>/ },
    ],
    [
      'registry endpoint empty image',
      { [SRC]: 'registry', [END]: 'docker://' },
      undefined,
      false,
      { kind: 'invalid', message: /storage\.import\.endpoint/ },
    ],
    [
      'unknown source',
      { [SRC]: 's3', [END]: 's3://b/k' },
      undefined,
      false,
      { kind: 'invalid', message: /^cdi\.kubevirt\.io\/storage\.import\.source: "s3" is not one of http, registry, none/ },
    ],
  ];
  for (const [name, annotations, reported, marker, want] of cases) t.match(decideImport(annotations, reported, marker), want, name);
  t.same(
    decideImport({ [SRC]: 'http', [END]: 'http://a/b' }, undefined, false),
    { kind: 'import', source: { kind: 'http', url: 'http://a/b' } },
    'no secretName key without the annotation',
  );
});

t.test('lastProgress: the last figure of qemu-img convert -p output', async (t) => {
  const cases: [string, number | undefined][] = [
    ['    (0.00/100%)\r', 0],
    ['    (12.50/100%)\r    (45.20/100%)\r', 45.2],
    ['    (100.00/100%)\r\n', 100],
    ['qemu-img: warning\n', undefined],
    ['', undefined],
  ];
  for (const [text, want] of cases) t.equal(lastProgress(text), want, JSON.stringify(text));
});

t.test('ProgressThrottle: about once a second, a finished figure always, no repeats', async (t) => {
  let now = 0;
  const throttle = new ProgressThrottle(1000, () => now);
  const seen: number[] = [];
  for (const [at, percent] of [
    [0, 1],
    [200, 2],
    [999, 3],
    [1000, 4],
    [1500, 5],
    [2100, 5],
    [2200, 6],
    [2300, 100],
  ] as const) {
    now = at;
    if (throttle.admit(percent)) seen.push(percent);
  }
  t.same(seen, [1, 4, 5, 100]);
});

t.test(
  "sizeRefusal: an image larger than its claim's capacity or device is refused, naming the claim's size field and both sizes",
  async (t) => {
    t.equal(sizeRefusal(2 ** 30, { bytes: 2 ** 30, of: 'capacity' }, 'root'), undefined);
    t.equal(sizeRefusal(2 ** 30, { bytes: undefined, of: 'capacity' }, 'root'), undefined);
    t.equal(
      sizeRefusal(2 ** 31, { bytes: 2 ** 30, of: 'capacity' }, 'root'),
      `spec.resources.requests.storage: the image's virtual size, 2048 MiB, is larger than claim "root"'s capacity, 1024 MiB`,
    );
    t.equal(
      sizeRefusal(2 ** 30 + 1, { bytes: 2 ** 30, of: 'device' }, 'root'),
      `spec.resources.requests.storage: the image's virtual size, 1025 MiB, is larger than claim "root"'s block device's size, 1024 MiB`,
      'a device one byte short refuses',
    );
  },
);

t.test(
  'stagingOf: a raw download is adopted as the disk; the rest is converted, the image store left alone; a Block volume is written onto',
  async (t) => {
    const kinds = ['http', 'registry'] as const;
    const formats = ['raw', 'qcow2'] as const;
    const table = (mode: 'Filesystem' | 'Block') =>
      Object.fromEntries(kinds.flatMap((k) => formats.map((f) => [`${k} ${f}`, stagingOf(k, f, mode)])));
    t.same(table('Filesystem'), {
      'http raw': 'adopt-download',
      'http qcow2': 'convert',
      'registry raw': 'convert',
      'registry qcow2': 'convert',
    });
    t.same(table('Block'), {
      'http raw': 'onto-device',
      'http qcow2': 'onto-device',
      'registry raw': 'onto-device',
      'registry qcow2': 'onto-device',
    });
  },
);

t.test('importPercent: download 0-90, its convert 90-100, a local convert 0-100, clamped', async (t) => {
  const cases: [Parameters<typeof importPercent>, number][] = [
    [['download', 0, true], 0],
    [['download', 50, true], 45],
    [['download', 100, true], 90],
    [['convert', 0, true], 90],
    [['convert', 50, true], 95],
    [['convert', 100, true], 100],
    [['convert', 50, false], 50],
    [['download', 130, true], 90],
    [['convert', -5, false], 0],
  ];
  t.same(
    cases.map(([args]) => importPercent(...args)),
    cases.map(([, want]) => want),
  );
});

t.test(
  'readOnlyField: the field that makes a VMI use of a claim read-only, first the VMI volume, then the PV, then ReadOnlyMany',
  async (t) => {
    const base = { claim: 'root', pvName: 'pv-1', pvReadOnly: false, accessMode: 'MULTI_NODE_MULTI_WRITER' as const };
    t.same(
      [
        readOnlyField(base),
        readOnlyField({ ...base, readOnlyVolume: 2, pvReadOnly: true }),
        readOnlyField({ ...base, pvReadOnly: true, accessMode: 'MULTI_NODE_READER_ONLY' }),
        readOnlyField({ ...base, accessMode: 'MULTI_NODE_READER_ONLY' }),
      ],
      [
        undefined,
        'spec.volumes[2].persistentVolumeClaim.readOnly',
        'PersistentVolume pv-1 spec.csi.readOnly',
        'claim "root" spec.accessModes (ReadOnlyMany only)',
      ],
    );
  },
);
