import t from 'tap';
import { agentInfoFromReplies, filesystemsFromAgent, guestAgentInfo, guestUsers, usersFromAgent } from './guest-queries.js';

t.test("guest-get-users' reply becomes users; entries without a user name are left out", async (t) => {
  t.same(
    usersFromAgent([
      { user: 'root', 'login-time': 1732420000.25 },
      { user: 'Administrator', domain: 'CORP', 'login-time': 1732420001 },
      { domain: 'x' },
      'junk',
    ]),
    [
      { name: 'root', loginTimeS: 1732420000.25 },
      { name: 'Administrator', domain: 'CORP', loginTimeS: 1732420001 },
    ],
  );
  t.same(usersFromAgent(undefined), [], 'no reply: no users');
});

t.test("guest-get-fsinfo's reply becomes filesystems with their disks; sizes the agent could not read are 0", async (t) => {
  t.same(
    filesystemsFromAgent([
      {
        name: 'vdc',
        mountpoint: '/mnt',
        type: 'iso9660',
        'used-bytes': 374784,
        'total-bytes': 374784,
        disk: [{ 'bus-type': 'virtio', bus: 0, target: 0, unit: 0, serial: 'cidata', dev: '/dev/vdc', 'pci-controller': {} }],
      },
      { name: 'sda1', mountpoint: '/boot', type: 'vfat', disk: [{ 'bus-type': 'scsi' }] },
      { mountpoint: '/nameless' },
    ]),
    [
      {
        diskName: 'vdc',
        mountPoint: '/mnt',
        type: 'iso9660',
        usedBytes: 374784,
        totalBytes: 374784,
        disks: [{ busType: 'virtio', serial: 'cidata' }],
      },
      { diskName: 'sda1', mountPoint: '/boot', type: 'vfat', usedBytes: 0, totalBytes: 0, disks: [{ busType: 'scsi' }] },
    ],
  );
});

t.test('the users query asks the agent guest-get-users', async (t) => {
  const asked: unknown[] = [];
  const users = await guestUsers(async (command) => {
    asked.push(command);
    return [{ user: 'root', 'login-time': 1 }];
  });
  t.same({ asked, users }, { asked: [{ execute: 'guest-get-users' }], users: [{ name: 'root', loginTimeS: 1 }] });
});

t.test(
  "guest-info, guest-get-host-name and guest-get-timezone become the agent's info; what the agent does not say is empty",
  async (t) => {
    t.same(
      agentInfoFromReplies(
        {
          version: '7.2.19',
          supported_commands: [{ name: 'guest-ping', enabled: true, 'success-response': true }, { name: 'guest-exec', enabled: false }, {}],
        },
        { 'host-name': 'vkvm-guest' },
        { zone: 'UTC', offset: 0 },
      ),
      {
        agentVersion: '7.2.19',
        supportedCommands: [
          { name: 'guest-ping', enabled: true },
          { name: 'guest-exec', enabled: false },
        ],
        hostname: 'vkvm-guest',
        timezone: 'UTC, 0',
      },
    );
    t.same(agentInfoFromReplies({ version: '5.0' }, undefined, { offset: 3600 }), {
      agentVersion: '5.0',
      supportedCommands: [],
      hostname: '',
      timezone: ', 3600',
    });
  },
);

t.test('the agent info query tolerates an agent without the host name and time zone commands', async (t) => {
  const info = await guestAgentInfo(async (command) => {
    if (command.execute === 'guest-info') return { version: '2.5' };
    throw new Error(`The command ${command.execute} has not been found`);
  });
  t.same(info, { agentVersion: '2.5', supportedCommands: [], hostname: '', timezone: '' });
});
