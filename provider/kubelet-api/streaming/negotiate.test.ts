import t from 'tap';
import { negotiate, offeredProtocols, protocolTraits, requestedTransport, SPDY_PROTOCOLS } from './negotiate.js';
import { encodeStatus, exitStatus, statusFromError, success } from './status.js';
import { NoGuestAgentError } from '../vm-access.js';
import { NotFoundError } from '../errors.js';

t.test('the client’s first supported version wins, from repeated or comma-joined headers', async (t) => {
  t.same(
    {
      clientGo: negotiate(
        offeredProtocols('v5.channel.k8s.io, v4.channel.k8s.io, v3.channel.k8s.io, v2.channel.k8s.io, channel.k8s.io'),
        SPDY_PROTOCOLS,
      ),
      v4First: negotiate(offeredProtocols(['v4.channel.k8s.io', 'v5.channel.k8s.io']), SPDY_PROTOCOLS),
      onlyV1: negotiate(offeredProtocols('channel.k8s.io'), SPDY_PROTOCOLS),
      none: negotiate(offeredProtocols(undefined), SPDY_PROTOCOLS),
    },
    { clientGo: 'v5.channel.k8s.io', v4First: 'v4.channel.k8s.io', onlyV1: undefined, none: undefined },
  );
});

t.test('upgrade headers name the transport', async (t) => {
  t.same(
    [
      requestedTransport({ connection: 'Upgrade', upgrade: 'SPDY/3.1' }),
      requestedTransport({ connection: 'keep-alive, Upgrade', upgrade: 'websocket' }),
      requestedTransport({ upgrade: 'SPDY/3.1' }),
      requestedTransport({ connection: 'Upgrade', upgrade: 'h2c' }),
    ],
    ['spdy', 'websocket', undefined, undefined],
  );
});

t.test('the error stream carries JSON from v4 on, and the failure message alone before', async (t) => {
  const v4 = protocolTraits('v4.channel.k8s.io');
  const v3 = protocolTraits('v3.channel.k8s.io');
  t.same(
    {
      v4Success: encodeStatus(success(), v4).toString(),
      v4Exit: JSON.parse(encodeStatus(exitStatus(2), v4).toString()),
      v3Success: encodeStatus(success(), v3).toString(),
      v3Exit: encodeStatus(exitStatus(2), v3).toString(),
      v2Resize: protocolTraits('v2.channel.k8s.io').resize,
      v5Close: protocolTraits('v5.channel.k8s.io').closeSignal,
    },
    {
      v4Success: '{"metadata":{},"status":"Success"}',
      v4Exit: {
        metadata: {},
        status: 'Failure',
        message: 'command terminated with non-zero exit code: 2',
        reason: 'NonZeroExitCode',
        details: { causes: [{ reason: 'ExitCode', message: '2' }] },
      },
      v3Success: '',
      v3Exit: 'command terminated with non-zero exit code: 2',
      v2Resize: false,
      v5Close: true,
    },
  );
});

t.test('error kinds map to session statuses', async (t) => {
  t.match(
    [
      statusFromError(new NoGuestAgentError('no agent')),
      statusFromError(new NotFoundError('no pod')),
      statusFromError(new Error('launcher gone')),
    ],
    [
      { status: 'Failure', reason: 'BadRequest', code: 400, message: 'no agent' },
      { status: 'Failure', reason: 'NotFound', code: 404, message: 'no pod' },
      {
        status: 'Failure',
        reason: 'InternalError',
        code: 500,
        message: 'Internal error occurred: error executing command in container: launcher gone',
      },
    ],
  );
});
