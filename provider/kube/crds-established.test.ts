import t from 'tap';
import { established } from './crds-established.js';

t.test('a CRD is served once its Established condition is True', async (t) => {
  const crd = (conditions?: Array<{ type: string; status: string }>) => ({ status: { ...(conditions ? { conditions } : {}) } });
  t.equal(established(crd()), false, 'just created: no conditions');
  t.equal(established(crd([{ type: 'NamesAccepted', status: 'True' }])), false, 'names accepted is not enough');
  t.equal(established(crd([{ type: 'Established', status: 'False' }])), false);
  t.equal(
    established(
      crd([
        { type: 'NamesAccepted', status: 'True' },
        { type: 'Established', status: 'True' },
      ]),
    ),
    true,
  );
});
