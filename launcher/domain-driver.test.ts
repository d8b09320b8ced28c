import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { Hypervisor } from '@unraid/libvirt';
import { agentChannelConnected, DomainDriver, isAgentLifecycleLine, parseLifecycleLine } from './domain-driver.js';

t.test('parseLifecycleLine reads virsh event output', async (t) => {
  t.same(parseLifecycleLine("event 'lifecycle' for domain 'vm-1': Stopped Destroyed"), { type: 'Stopped', detail: 'Destroyed' });
  t.same(parseLifecycleLine("event 'lifecycle' for domain 'a b': Shutdown Finished after guest request"), {
    type: 'Shutdown',
    detail: 'Finished after guest request',
  });
  t.equal(parseLifecycleLine("event 'reboot' for domain 'vm-1'"), undefined, 'other events are not lifecycle');
  t.equal(parseLifecycleLine('events received: 3'), undefined);
});

t.test('agent-lifecycle events are told from the others', async (t) => {
  t.same(
    [
      "event 'agent-lifecycle' for domain 'vm-1': state: 'connected' reason: 'channel event'",
      "event 'lifecycle' for domain 'vm-1': Started Booted",
    ].map(isAgentLifecycleLine),
    [true, false],
  );
});

t.test("the guest agent counts as connected when libvirt marks its channel's target so", async (t) => {
  const channel = (target: string) =>
    `<domain><devices><channel type='unix'><source mode='bind' path='/q/agent.sock'/>${target}</channel></devices></domain>`;
  t.same(
    [
      channel("<target type='virtio' name='org.qemu.guest_agent.0' state='connected'/>"),
      channel("<target type='virtio' name='org.qemu.guest_agent.0' state='disconnected'/>"),
      channel("<target type='virtio' name='org.qemu.guest_agent.0'/>"),
      channel("<target type='virtio' name='org.example.other' state='connected'/>"),
      '<domain><devices/></domain>',
    ].map(agentChannelConnected),
    [true, false, false, false, false],
  );
});

t.test('virsh start gets its own, longer timeout; a command killed by its timeout says so', async (t) => {
  // A virsh on PATH that takes 300 ms to answer any command.
  const bin = await mkdtemp(join(tmpdir(), 'vkvm-virsh-'));
  t.teardown(() => rm(bin, { recursive: true, force: true }));
  await writeFile(join(bin, 'virsh'), '#!/bin/sh\nsleep 0.3\n', { mode: 0o755 });
  const path = process.env.PATH;
  process.env.PATH = `${bin}:${path}`;
  t.teardown(() => void (process.env.PATH = path));
  const driver = new DomainDriver({} as Hypervisor, 'qemu:///system', { commandMs: 100, startMs: 5_000 });
  await driver.startPaused('u-1');
  await t.rejects(driver.reset('u-1'), /virsh reset: no answer in 100 ms, killed/);
});
