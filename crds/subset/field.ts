// Builders for the subset table (crds/subset/): each field states once its
// schema in the CRD, the TypeScript type of its value and whether vkvm reads
// it. The CRDs (crds/kubevirt.ts), the API types (provider/kubevirt/types.ts)
// and the supported-field tree (provider/kubevirt/supported-fields.ts) are all
// derived from the table, so a field added there reaches all three.
//
// The defaults fit most fields: in the CRD, optional, read by vkvm. The
// modifiers at the end state the exceptions.
import * as schema from '../schema.js';
import type { JsonSchema, ValidationRule } from '../schema.js';

/** A resource.Quantity on the wire: "64M", "1Gi", "500m", or a bare JSON number. */
export type Quantity = string | number;
/** A metav1.Time on the wire (RFC 3339). */
export type Time = string;

/** What of a value vkvm reads: `true` all of it, an object only these keys, a one-item array a list of that shape. */
export type FieldShape = true | { readonly [key: string]: FieldShape } | readonly [FieldShape];

/** The schema of a field at its path; a function only where a CEL message names the path. */
type SchemaAt = JsonSchema | ((at: string) => JsonSchema);

declare const phantom: unique symbol;

export interface Field<T = unknown, IsRequired extends boolean = boolean> {
  /** Never set: carries the value's type and whether the enclosing object's type requires the field. */
  readonly [phantom]?: { value: T; required: IsRequired };
  /** Undefined when the CRD leaves the field to the parent's preserved unknown fields. */
  readonly schema: SchemaAt | undefined;
  /** The parent's schema lists the field in `required`. */
  readonly schemaRequired: boolean;
  /** What of the value vkvm reads; undefined: none of it, so a value that asks for something is reported. */
  readonly reads: FieldShape | undefined;
}

type Fields = { readonly [key: string]: Field };

/** The TypeScript type of a field's value. */
export type TypeOf<F> = F extends Field<infer T> ? T : never;

type RequiredKeys<P extends Fields> = { [K in keyof P]: P[K] extends Field<unknown, true> ? K : never }[keyof P];
/** The object type of `properties`; `infer` makes it one plain object type, as editors then show it (with the table's doc comments). */
type ObjectOf<P extends Fields> = {
  -readonly [K in keyof P as K extends RequiredKeys<P> ? K : never]: TypeOf<P[K]>;
} & { -readonly [K in keyof P as K extends RequiredKeys<P> ? never : K]?: TypeOf<P[K]> } extends infer O
  ? { [K in keyof O]: O[K] }
  : never;

export const schemaAt = (s: SchemaAt, at: string): JsonSchema => (typeof s === 'function' ? s(at) : s);

function leaf<T>(s: JsonSchema): Field<T, false> {
  return { schema: s, schemaRequired: false, reads: true };
}

export const string = <T extends string = string>(description?: string, extra?: Omit<JsonSchema, 'type'>): Field<T, false> =>
  leaf(schema.string(description, extra));
export const enumOf = <const V extends readonly string[]>(values: V, description?: string): Field<V[number], false> =>
  leaf(schema.enumOf(values, description));
export const integer = (description?: string, extra?: Omit<JsonSchema, 'type'>): Field<number, false> =>
  leaf(schema.integer(description, extra));
/** An IntOrString: a port by number or by name. */
export const intOrString = (description?: string): Field<number | string, false> =>
  leaf({ ...(description ? { description } : {}), anyOf: [{ type: 'integer' }, { type: 'string' }], 'x-kubernetes-int-or-string': true });
export const boolean = (description?: string): Field<boolean, false> => leaf(schema.boolean(description));
export const quantity = (description?: string): Field<Quantity, false> => leaf(schema.quantity(description));
export const resourceList = (description?: string): Field<Record<string, Quantity>, false> => leaf(schema.resourceList(description));
export const stringMap = (description?: string): Field<Record<string, string>, false> => leaf(schema.stringMap(description));
/** Nullable: Go clients write `null` for an unset metav1.Time. */
export const time = (description?: string): Field<Time | null, false> => leaf(schema.time(description));

/**
 * An object the schema does not type, empty in TypeScript unless `T` says
 * otherwise; vkvm reads none of its content unless `reading` says so. (Two
 * signatures rather than a default for `T`, which the context would override.)
 */
export function opaque(description?: string): Field<Record<string, never>, false>;
export function opaque<T>(description?: string): Field<T, false>;
export function opaque(description?: string): Field<unknown, false> {
  return { schema: schema.opaque(description), schemaRequired: false, reads: {} };
}

interface ObjectOptions {
  description?: string;
  /** Keep fields the schema does not name (KubeVirt has more than vkvm types). */
  preserveUnknown?: boolean;
  /** CEL rules; `at` is the object's field path, for the messages. */
  rules?: (at: string) => ValidationRule[];
}

/**
 * An object; key order of `properties` is the order in the generated YAML.
 * Its schema is built once when no rule below it needs the path, so a
 * subtree used twice in one CRD is one object there (the YAML shows an alias).
 */
export function object<const P extends Fields>(
  properties: P,
  opts: ObjectOptions = {},
): Field<ObjectOf<P>, false> & { readonly reads: { readonly [key: string]: FieldShape } } {
  const entries = Object.entries(properties);
  const build = (at: string): JsonSchema => {
    const typed = entries.flatMap(([key, f]) => (f.schema === undefined ? [] : [[key, f] as const]));
    return schema.object(Object.fromEntries(typed.map(([key, f]) => [key, schemaAt(f.schema!, at ? `${at}.${key}` : key)])), {
      description: opts.description,
      required: typed.filter(([, f]) => f.schemaRequired).map(([key]) => key),
      preserveUnknown: opts.preserveUnknown,
      rules: opts.rules?.(at),
    });
  };
  const pathFree = !opts.rules && entries.every(([, f]) => typeof f.schema !== 'function');
  return {
    schema: pathFree ? build('') : build,
    schemaRequired: false,
    reads: Object.fromEntries(entries.flatMap(([key, f]) => (f.reads === undefined ? [] : [[key, f.reads]]))),
  };
}

/** A list; its items share its path in rule messages. */
export function list<F extends Field>(
  item: F,
  opts: { description?: string; maxItems?: number; rules?: (at: string) => ValidationRule[] } = {},
): Field<TypeOf<F>[], false> {
  const itemSchema = item.schema!;
  const build = (at: string) =>
    schema.list(schemaAt(itemSchema, at), { description: opts.description, maxItems: opts.maxItems, rules: opts.rules?.(at) });
  return {
    schema: !opts.rules && typeof itemSchema !== 'function' ? build('') : build,
    schemaRequired: false,
    reads: item.reads === undefined ? undefined : [item.reads],
  };
}

// ---- modifiers ----

/** Required by the parent's schema, and so by its type. */
export const required = <T>(f: Field<T>): Field<T, true> => ({ ...(f as Field<T, true>), schemaRequired: true });

/** Required by the type only: status fields vkvm always writes, which the schema leaves optional. */
export const alwaysSet = <T>(f: Field<T>): Field<T, true> => f as Field<T, true>;

/** Typed and read by vkvm, but not in the CRD: it is kept there among the parent's preserved fields. */
export const notInCrd = <T, R extends boolean>(f: Field<T, R>): Field<T, R> => ({ ...f, schema: undefined, schemaRequired: false });

/** In the CRD, but vkvm does not realize it: a set value is reported as unsupported. */
export const unsupported = <T, R extends boolean>(f: Field<T, R>): Field<T, R> => ({ ...f, reads: undefined });

/** vkvm reads `shape` of the value rather than what its schema types. */
export const reading = <T, R extends boolean>(shape: FieldShape, f: Field<T, R>): Field<T, R> => ({ ...f, reads: shape });

/**
 * The type admits any string besides the schema's values: translate.ts
 * reports other values itself, as KubeVirt's admission does, for objects that
 * did not pass this CRD.
 */
export const open = <T extends string, R extends boolean>(f: Field<T, R>): Field<T | (string & {}), R> => f;
