import t from 'tap';
import { formatProgress, importCondition, importReportOf, IMPORT_CONDITION_TYPE } from './datavolume-report.js';

const now = new Date('2026-11-28T01:00:00Z');

t.test('the node writes one condition per phase; the controller reads the three contract values back', async (t) => {
  const cases: [Parameters<typeof importCondition>, object, object][] = [
    [
      ['Running', 45.2, undefined, now],
      { status: 'Unknown', reason: 'Running', message: '45.20%' },
      { phase: 'Running', progress: '45.20%' },
    ],
    [
      ['Succeeded', 100, undefined, now],
      { status: 'True', reason: 'Succeeded', message: '100.00%' },
      { phase: 'Succeeded', progress: '100.00%' },
    ],
    [
      ['Failed', 12, 'cdi.kubevirt.io/storage.import.endpoint: refused', now],
      { status: 'False', reason: 'Failed', message: 'cdi.kubevirt.io/storage.import.endpoint: refused' },
      { phase: 'Failed', progress: '0.00%', message: 'cdi.kubevirt.io/storage.import.endpoint: refused' },
    ],
  ];
  for (const [args, condition, report] of cases) {
    const c = importCondition(...args);
    t.same(c, { type: IMPORT_CONDITION_TYPE, lastTransitionTime: now, ...condition }, `${args[0]}: the condition`);
    t.same(importReportOf([{ type: 'Resizing', status: 'True' }, c]), report, `${args[0]}: read back beside a resize condition`);
  }
  t.equal(importReportOf(undefined), undefined, 'no conditions: no report');
  t.equal(importReportOf([{ type: IMPORT_CONDITION_TYPE, status: 'True', reason: 'Other' }]), undefined, 'an unknown reason is no report');
  t.same([formatProgress(100), formatProgress(130), formatProgress(-1), formatProgress(3.14159)], ['100.00%', '100.00%', '0.00%', '3.14%']);
});
