// The test guest's #cloud-config reader, run by the host's busybox (the same
// busybox-static the guest is built from): what it makes of user-data, and
// what the commands it writes print when busybox sh runs them.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { renderNoCloudFiles } from './nocloud.js';

const files = renderNoCloudFiles(['isofs', 'sr_mod']);

/** Runs the reader on `userData`: its stdout, and what runcmd.sh and bootcmd.sh print under busybox sh. */
function readCloudConfig(dir: string, userData: string) {
  writeFileSync(join(dir, 'awk'), files.get('/etc/vkvm-cloud-config.awk')!);
  writeFileSync(join(dir, 'user-data'), userData);
  const stdout = execFileSync('busybox', ['awk', '-v', `dir=${dir}`, '-f', join(dir, 'awk'), join(dir, 'user-data')], { encoding: 'utf8' });
  const ran = (name: string) =>
    existsSync(join(dir, name)) ? execFileSync('busybox', ['sh', join(dir, name)], { encoding: 'utf8', cwd: dir }) : undefined;
  return { stdout, bootcmd: ran('bootcmd.sh'), runcmd: ran('runcmd.sh') };
}

t.test('#cloud-config: hostname, bootcmd and runcmd (strings and argv lists, quoted as YAML quotes); other keys named', async (t) => {
  const userData = `#cloud-config
# a comment
hostname: "web-1"
password: fedora
chpasswd: { expire: False }
bootcmd:
  - echo early
runcmd:
  - echo "two words" > out.txt   # a YAML comment
  - [sh, -c, "echo argv $((1+2))"]
  - [echo, "it's"]
  - 'echo single ''quoted'''
  - "echo \\"double\\""
ssh_authorized_keys:
  - ssh-ed25519 AAAA test
`;
  const dir = t.testdir();
  t.same(readCloudConfig(dir, userData), {
    stdout: 'hostname web-1\nignored password\nignored chpasswd\nignored ssh_authorized_keys\n',
    bootcmd: 'early\n',
    runcmd: "argv 3\nit's\nsingle quoted\ndouble\n",
  });
  t.equal(readFileSync(join(dir, 'out.txt'), 'utf8'), 'two words\n', 'a string item is a shell command line');
});

t.test('#cloud-config: fqdn stands in for hostname; a block scalar command is named, not run', async (t) => {
  t.same(readCloudConfig(t.testdir(), '#cloud-config\nfqdn: web-1.example.org\nruncmd:\n  - |\n    echo block\n'), {
    stdout: 'fqdn web-1.example.org\nignored runcmd block scalar\n',
    bootcmd: undefined,
    runcmd: undefined,
  });
});

t.test('meta-data keys are read from YAML and from JSON (as KubeVirt writes it)', async (t) => {
  const dir = t.testdir();
  writeFileSync(join(dir, 'meta-data-script'), files.get('/bin/vkvm-meta-data')!);
  const read = (doc: string, key: string) => {
    writeFileSync(join(dir, 'meta-data'), doc);
    return execFileSync('busybox', ['sh', join(dir, 'meta-data-script'), key, join(dir, 'meta-data')], { encoding: 'utf8' });
  };
  const yaml = 'instance-id: iid-1\nlocal-hostname: "web-1"\n';
  const json = '{"instance-id":"b836436e-b413-42da-96a8-f32cae92248d","local-hostname":"bios-vmi"}';
  const pretty = JSON.stringify({ 'local-hostname': 'pretty', 'instance-id': 'iid-3' }, null, 2);
  t.same(
    [
      read(yaml, 'instance-id'),
      read(yaml, 'local-hostname'),
      read(json, 'instance-id'),
      read(json, 'local-hostname'),
      read(pretty, 'local-hostname'),
      read(yaml, 'absent'),
    ],
    ['iid-1\n', 'web-1\n', 'b836436e-b413-42da-96a8-f32cae92248d\n', 'bios-vmi\n', 'pretty\n', ''],
  );
});

t.test('the NoCloud step loads the modules it is given and reports as cloud-init does', async (t) => {
  const script = files.get('/bin/vkvm-nocloud')!;
  t.match(script, /^#!\/bin\/sh\n/);
  t.match(script, /for m in isofs sr_mod; do insmod/);
  t.match(script, /echo "Cloud-init v\. vkvm-guest finished at \$\(date -R\)\. Datasource \$ds\./);
  t.notMatch(script, /@[A-Z]+@/, 'no placeholder left');
});
