// Serialises a DomainDraft with xml2js's builder. Sections left undefined in
// the skeleton are dropped here, because xml2js would render them as text.
import { Builder } from 'xml2js';
import type { DomainDraft } from './draft.js';

const builder = new Builder({ rootName: 'domain', headless: true, renderOpts: { pretty: true, indent: '  ', newline: '\n' } });

function dropUndefined(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(dropUndefined);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => [k, dropUndefined(v)]),
  );
}

export function serializeDomain(draft: DomainDraft): string {
  return `${builder.buildObject(dropUndefined(draft))}\n`;
}
