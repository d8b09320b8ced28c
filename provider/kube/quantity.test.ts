import t from 'tap';
import { parseQuantity } from './quantity.js';

t.test('parses the Kubernetes quantity grammar', async (t) => {
  t.same(['500m', '2', '1.5', '128Mi', '1Gi', '1G', '1e3', '0.5Ki', 'x', '1Qi', '', '12 Mi'].map(parseQuantity), [
    0.5,
    2,
    1.5,
    128 * 2 ** 20,
    2 ** 30,
    1e9,
    1000,
    512,
    null,
    null,
    null,
    null,
  ]);
});
