// SyncVm's spec_json as a VmSpec this launcher can run, or a SpecError naming
// what is wrong: not JSON, another spec version, another VM's uid, or what
// vmm's validation refuses.
import { SpecError, type SpecCauseReason } from '../vmm/errors.js';
import { VM_SPEC_VERSION, type VmSpec } from '../vmm/spec.js';

function invalidSpec(path: string, reason: SpecCauseReason, message: string): SpecError {
  return new SpecError([{ path, reason, message }]);
}

export function parseSpec(specJson: string, uid: string, vmm: { validate(spec: VmSpec): SpecError | null }): VmSpec {
  let spec: VmSpec;
  try {
    spec = JSON.parse(specJson) as VmSpec;
  } catch (err) {
    throw invalidSpec('', 'FieldValueInvalid', `spec_json is not JSON: ${(err as Error).message}`);
  }
  if (typeof spec !== 'object' || spec === null) throw invalidSpec('', 'FieldValueInvalid', 'spec_json must hold a JSON object');
  if (spec.version !== VM_SPEC_VERSION) {
    throw invalidSpec(
      'version',
      'FieldValueNotSupported',
      `spec version ${String(spec.version)} is not supported; this launcher speaks ${VM_SPEC_VERSION}`,
    );
  }
  if (spec.uid !== uid) throw invalidSpec('uid', 'FieldValueInvalid', `this launcher runs VM ${uid}, not ${String(spec.uid)}`);
  const invalid = vmm.validate(spec);
  if (invalid) throw invalid;
  return spec;
}
