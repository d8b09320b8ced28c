// cloudInitNoCloud volumes as a NoCloud seed, the way KubeVirt builds it
// (pkg/cloud-init/cloud-init.go): user data and network data each from
// exactly one of inline text, base64 or a Secret (key "userdata"/"userData",
// "networkdata"/"networkData"); meta-data is JSON with instance-id = the
// firmware UUID and local-hostname = the VMI's hostname.
import type { Draft } from './draft.js';
import type { CloudInitNoCloudSource, LocalObjectReference } from './types.js';

export interface NoCloudData {
  userData: string;
  networkData?: string;
}

/** Go's base64.StdEncoding (padded, no URL alphabet); line breaks are dropped first as Go's decoder does. */
export function decodeBase64(text: string): string | null {
  const compact = text.replace(/[\r\n]/g, '');
  if (compact.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(compact)) return null;
  return Buffer.from(compact, 'base64').toString('utf8');
}

type Part = { inline?: string; base64?: string; secret?: LocalObjectReference; field: 'userData' | 'networkData' };

function readPart(d: Draft, part: Part, at: string): string | undefined {
  const prefix = part.field === 'userData' ? 'userData' : 'networkData';
  if (part.inline) return part.inline;
  if (part.base64) {
    const decoded = decodeBase64(part.base64);
    if (decoded === null) d.report(`${at}.${prefix}Base64`, 'FieldValueInvalid', `${at}.${prefix}Base64 is not a valid base64 value.`);
    return decoded ?? undefined;
  }
  if (!part.secret?.name) return undefined;
  const refField = part.field === 'userData' ? 'secretRef' : 'networkDataSecretRef';
  const secret = d.ctx.secrets[part.secret.name];
  const keys = part.field === 'userData' ? ['userdata', 'userData'] : ['networkdata', 'networkData'];
  if (!secret) {
    d.report(`${at}.${refField}`, 'FieldValueNotFound', `secret "${part.secret.name}" was not found in the VMI's namespace`);
    return undefined;
  }
  const key = keys.find((k) => secret[k] !== undefined);
  if (key === undefined) {
    d.report(`${at}.${refField}`, 'FieldValueNotFound', `secret "${part.secret.name}" has no "${keys[0]}" (or "${keys[1]}") key`);
    return undefined;
  }
  return secret[key];
}

/** The seed's user and network data, or null after reporting why there is none. `at` is spec.volumes[j].cloudInitNoCloud. */
export function noCloudData(d: Draft, source: CloudInitNoCloudSource, at: string): NoCloudData | null {
  const user: Part = { inline: source.userData, base64: source.userDataBase64, secret: source.secretRef, field: 'userData' };
  const network: Part = {
    inline: source.networkData,
    base64: source.networkDataBase64,
    secret: source.networkDataSecretRef,
    field: 'networkData',
  };
  const count = (p: Part) => [p.inline, p.base64, p.secret?.name].filter(Boolean).length;
  const before = d.causes.length;
  if (count(user) > 1) d.report(at, 'FieldValueInvalid', `${at} must have only one userdatasource set.`);
  if (count(network) > 1) d.report(at, 'FieldValueInvalid', `${at} must have only one networkdata source set.`);
  if (count(user) + count(network) === 0) {
    d.report(at, 'FieldValueRequired', `${at} must have at least one userdatasource or one networkdatasource set.`);
  }
  const userData = readPart(d, user, at);
  const networkData = readPart(d, network, at);
  if (d.causes.length > before) return null;
  return { userData: userData ?? '', ...(networkData ? { networkData } : {}) };
}

/** NoCloud meta-data as KubeVirt writes it: json.Marshal of {instance-id, local-hostname}. */
export function noCloudMetaData(instanceId: string, hostname: string): string {
  return JSON.stringify({ 'instance-id': instanceId, 'local-hostname': hostname });
}
