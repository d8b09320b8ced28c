import t from 'tap';
import { kubeconfigPath } from './kubeconfig-path.js';

const existing = new Set(['/etc/vkvm/admin.conf', '/root/.kube/config']);
const exists = (p: string) => existing.has(p);

t.test('--kubeconfig wins over $KUBECONFIG', async (t) => {
  t.equal(kubeconfigPath('/flag.conf', { KUBECONFIG: '/root/.kube/config' }, exists), '/flag.conf');
});

t.test('$KUBECONFIG: one file, or the first existing one of a list', async (t) => {
  t.equal(kubeconfigPath(undefined, { KUBECONFIG: '/root/.kube/config' }, exists), '/root/.kube/config');
  t.equal(kubeconfigPath(undefined, { KUBECONFIG: '/missing:/etc/vkvm/admin.conf:/root/.kube/config' }, exists), '/etc/vkvm/admin.conf');
  t.equal(kubeconfigPath(undefined, { KUBECONFIG: '::/root/.kube/config' }, exists), '/root/.kube/config', 'empty entries are skipped');
});

t.test('none of the listed files exists: the first, so the error names it', async (t) => {
  t.equal(kubeconfigPath(undefined, { KUBECONFIG: '/a:/b' }, exists), '/a');
});

t.test('neither flag nor $KUBECONFIG', async (t) => {
  t.equal(kubeconfigPath(undefined, {}, exists), undefined);
  t.equal(kubeconfigPath(undefined, { KUBECONFIG: '' }, exists), undefined);
});
