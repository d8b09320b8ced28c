// Small builders for structural OpenAPI v3 schemas (apiextensions.k8s.io/v1),
// written with the wire names so the objects serialise to YAML as they are.

/** A CEL rule (`x-kubernetes-validations` entry). */
export interface ValidationRule {
  rule: string;
  message: string;
  messageExpression?: string;
  /** Relative to the schema node the rule sits on, e.g. `.domain.devices.disks`. */
  fieldPath?: string;
  reason?: 'FieldValueInvalid' | 'FieldValueRequired' | 'FieldValueDuplicate' | 'FieldValueForbidden';
}

export interface JsonSchema {
  description?: string;
  type?: 'object' | 'array' | 'string' | 'integer' | 'boolean' | 'number';
  format?: string;
  enum?: string[];
  pattern?: string;
  minimum?: number;
  maximum?: number;
  maxLength?: number;
  maxItems?: number;
  maxProperties?: number;
  nullable?: boolean;
  required?: string[];
  properties?: Record<string, JsonSchema>;
  additionalProperties?: JsonSchema;
  items?: JsonSchema;
  anyOf?: JsonSchema[];
  'x-kubernetes-int-or-string'?: true;
  'x-kubernetes-preserve-unknown-fields'?: true;
  'x-kubernetes-validations'?: ValidationRule[];
}

interface ObjectOptions {
  description?: string;
  required?: string[];
  /** Keep fields the schema does not name (KubeVirt has more than vkvm types). */
  preserveUnknown?: boolean;
  rules?: ValidationRule[];
}

/** An object; key order of `properties` is the order in the generated YAML. */
export function object(properties: Record<string, JsonSchema>, opts: ObjectOptions = {}): JsonSchema {
  return {
    ...(opts.description ? { description: opts.description } : {}),
    type: 'object',
    ...(opts.required?.length ? { required: opts.required } : {}),
    ...(Object.keys(properties).length ? { properties } : {}),
    ...(opts.preserveUnknown ? { 'x-kubernetes-preserve-unknown-fields': true as const } : {}),
    ...(opts.rules?.length ? { 'x-kubernetes-validations': opts.rules } : {}),
  };
}

/** An object whose content is kept as given and not typed at all. */
export function opaque(description?: string): JsonSchema {
  return object({}, { description, preserveUnknown: true });
}

export function string(description?: string, extra: Omit<JsonSchema, 'type'> = {}): JsonSchema {
  return { ...(description ? { description } : {}), type: 'string', ...extra };
}

export function enumOf(values: readonly string[], description?: string): JsonSchema {
  return string(description, { enum: [...values] });
}

export function integer(description?: string, extra: Omit<JsonSchema, 'type'> = {}): JsonSchema {
  return { ...(description ? { description } : {}), type: 'integer', ...extra };
}

export function boolean(description?: string): JsonSchema {
  return { ...(description ? { description } : {}), type: 'boolean' };
}

/** RFC 3339 time as metav1.Time writes it; Go clients write `null` for an unset one. */
export function time(description?: string): JsonSchema {
  return string(description, { format: 'date-time', nullable: true });
}

export function list(items: JsonSchema, opts: { description?: string; maxItems?: number; rules?: ValidationRule[] } = {}): JsonSchema {
  return {
    ...(opts.description ? { description: opts.description } : {}),
    type: 'array',
    ...(opts.maxItems !== undefined ? { maxItems: opts.maxItems } : {}),
    items,
    ...(opts.rules?.length ? { 'x-kubernetes-validations': opts.rules } : {}),
  };
}

export function stringMap(description?: string): JsonSchema {
  return { ...(description ? { description } : {}), type: 'object', additionalProperties: { type: 'string' } };
}

/** The pattern Kubernetes uses for resource.Quantity in its own CRD schemas. */
export const QUANTITY_PATTERN =
  '^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$';

/** A resource.Quantity: `1Gi`, `"500m"` or a bare integer. */
export function quantity(description?: string): JsonSchema {
  return {
    ...(description ? { description } : {}),
    anyOf: [{ type: 'integer' }, { type: 'string' }],
    pattern: QUANTITY_PATTERN,
    'x-kubernetes-int-or-string': true,
  };
}

export function resourceList(description?: string): JsonSchema {
  return { ...(description ? { description } : {}), type: 'object', additionalProperties: quantity() };
}
