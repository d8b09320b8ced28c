import t from 'tap';
import { configureIoThreads } from './iothreads.js';
import { applyBuilder, testSpec, TCG_HOST } from '../testing/specs.js';

t.test('the domain declares the spec’s iothreads, and none when it has none', async (t) => {
  t.equal(applyBuilder(configureIoThreads, testSpec({ ioThreads: 3 }), TCG_HOST).iothreads, 3, 'three iothreads');
  t.equal(applyBuilder(configureIoThreads, testSpec(), TCG_HOST).iothreads, undefined, 'no <iothreads> element');
});
