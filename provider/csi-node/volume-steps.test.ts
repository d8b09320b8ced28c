import t from 'tap';
import { downSteps, upSteps, type PublicationRecord } from './volume-steps.js';
import { publishPath, publishRecordPath, stagingPath, stagingRecordPath, volumeAttachmentName, type CsiVolume } from './volume.js';

const root = '/var/lib/vkvm';
const v: CsiVolume = {
  pvName: 'pv-1',
  driver: 'csi.vkvm.io',
  volumeHandle: 'vol-1',
  volumeAttributes: {},
  volumeMode: 'Filesystem',
  accessMode: 'SINGLE_NODE_WRITER',
  readOnly: false,
};
const staged = stagingPath(root, v);
const target = publishPath(root, 'uid-1', v);
const record = { pvName: 'pv-1', driver: 'csi.vkvm.io', volumeHandle: 'vol-1', volumeMode: 'Filesystem' as const };

t.test('up: wait for the attachment when required, stage when the driver stages, record each before its call', async (t) => {
  const kinds = (traits: { attachRequired: boolean; stages: boolean }) => upSteps(root, 'node-a', 'uid-1', v, traits).map((s) => s.kind);
  t.same(
    {
      both: kinds({ attachRequired: true, stages: true }),
      noAttach: kinds({ attachRequired: false, stages: true }),
      noStage: kinds({ attachRequired: false, stages: false }),
    },
    {
      both: ['waitAttached', 'recordStaging', 'stage', 'recordPublication', 'publish'],
      noAttach: ['recordStaging', 'stage', 'recordPublication', 'publish'],
      noStage: ['recordPublication', 'publish'],
    },
  );
  t.same(upSteps(root, 'node-a', 'uid-1', v, { attachRequired: true, stages: true }), [
    { kind: 'waitAttached', attachment: volumeAttachmentName('vol-1', 'csi.vkvm.io', 'node-a') },
    { kind: 'recordStaging', path: stagingRecordPath(root, v), record: { ...record, stagingPath: staged } },
    { kind: 'stage', stagingPath: staged },
    {
      kind: 'recordPublication',
      path: publishRecordPath(root, 'uid-1', 'pv-1'),
      record: { ...record, stagingPath: staged, podUid: 'uid-1', targetPath: target },
    },
    { kind: 'publish', targetPath: target, stagingPath: staged },
  ]);
  t.same(upSteps(root, 'node-a', 'uid-1', v, { attachRequired: false, stages: false }).at(-1), { kind: 'publish', targetPath: target });
});

t.test('down: unpublish, then unstage only when no other pod on the node publishes the volume', async (t) => {
  const pub: PublicationRecord = { ...record, stagingPath: staged, podUid: 'uid-1', targetPath: target };
  const other = (podUid: string, volumeHandle = 'vol-1'): PublicationRecord => ({ ...pub, podUid, volumeHandle });
  const kinds = (p: PublicationRecord, others: PublicationRecord[]) => downSteps(root, p, others).map((s) => s.kind);
  t.same(
    {
      alone: kinds(pub, []),
      sharedWithAnotherPod: kinds(pub, [other('uid-2')]),
      anotherVolume: kinds(pub, [other('uid-2', 'vol-2')]),
      itsOwnRecord: kinds(pub, [pub]),
      neverStaged: kinds({ ...record, podUid: 'uid-1', targetPath: target }, []),
    },
    {
      alone: ['unpublish', 'forgetPublication', 'unstage', 'forgetStaging'],
      sharedWithAnotherPod: ['unpublish', 'forgetPublication'],
      anotherVolume: ['unpublish', 'forgetPublication', 'unstage', 'forgetStaging'],
      itsOwnRecord: ['unpublish', 'forgetPublication', 'unstage', 'forgetStaging'],
      neverStaged: ['unpublish', 'forgetPublication'],
    },
  );
  t.same(downSteps(root, pub, []), [
    { kind: 'unpublish', targetPath: target },
    { kind: 'forgetPublication', path: publishRecordPath(root, 'uid-1', 'pv-1'), targetPath: target },
    { kind: 'unstage', stagingPath: staged },
    { kind: 'forgetStaging', path: stagingRecordPath(root, v), stagingPath: staged },
  ]);
});
