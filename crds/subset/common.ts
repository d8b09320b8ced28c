// What several parts of the subset table share: the description of preserved
// fields, named list items, and the CEL rules whose messages name the field
// path they check.
import type { ValidationRule } from '../schema.js';
import { MAX_NAME_LENGTH } from './constants.js';
import { required, string } from './field.js';

export const PRESERVED = 'Fields vkvm does not support are kept as given; the controller reports them.';

/** The `name` of a disk, interface, network or volume: what pairs them. */
export const name = (what: string) => required(string(`Name of the ${what}.`, { maxLength: MAX_NAME_LENGTH }));

/** True when `spec` (a CEL expression for a VMI spec) states how much memory the guest gets. */
export function memoryGiven(spec: string): string {
  const d = `${spec}.domain`;
  return (
    `(has(${d}.memory) && has(${d}.memory.guest)) || ` +
    `(has(${d}.resources) && ((has(${d}.resources.requests) && 'memory' in ${d}.resources.requests) || ` +
    `(has(${d}.resources.limits) && 'memory' in ${d}.resources.limits)))`
  );
}

/** KubeVirt requires memory of every VMI; `path` is the VMI spec's. */
export function memoryRequired(path: string, rule: string, fieldPath: string): ValidationRule {
  return {
    rule,
    message:
      `no memory requested: set ${path}.domain.resources.requests.memory ` +
      `(or ${path}.domain.resources.limits.memory or ${path}.domain.memory.guest)`,
    fieldPath,
    reason: 'FieldValueRequired',
  };
}

/** The rule on a list at `path` whose items must have distinct names. */
export function uniqueNames(path: string, what: string): ValidationRule {
  return {
    rule: 'self.all(x, self.exists_one(y, y.name == x.name))',
    message: `${path}: each ${what} needs a unique name`,
  };
}
