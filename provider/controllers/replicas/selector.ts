// metav1.LabelSelector, as apimachinery evaluates and prints it: whether a
// label set matches, and the canonical string the scale subresource hands an
// HPA (status.labelSelector). Pure.
import type { LabelSelector } from '../../kubevirt/replica-types.js';

type Labels = Readonly<Record<string, string>> | undefined;

interface Requirement {
  key: string;
  operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist' | 'Equals';
  values: string[];
}

/** The selector's requirements sorted by key, as LabelSelectorAsSelector builds them. */
function requirements(selector: LabelSelector): Requirement[] {
  const fromLabels = Object.entries(selector.matchLabels ?? {}).map(([key, value]) => ({
    key,
    operator: 'Equals' as const,
    values: [value],
  }));
  const fromExpressions = (selector.matchExpressions ?? []).map((e) => ({
    key: e.key,
    operator: e.operator,
    values: [...(e.values ?? [])].sort(),
  }));
  return [...fromLabels, ...fromExpressions].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

function holds(r: Requirement, labels: Labels): boolean {
  const has = labels !== undefined && Object.hasOwn(labels, r.key);
  const value = has ? labels[r.key]! : undefined;
  switch (r.operator) {
    case 'Equals':
    case 'In':
      return has && r.values.includes(value!);
    case 'NotIn':
      return !has || !r.values.includes(value!);
    case 'Exists':
      return has;
    case 'DoesNotExist':
      return !has;
  }
}

/** The labels satisfy every requirement (an empty selector matches everything, as apimachinery's does). */
export function selectorMatches(selector: LabelSelector, labels: Labels): boolean {
  return requirements(selector).every((r) => holds(r, labels));
}

/** The selector as labels.Selector.String() prints it: `app=web,tier in (a,b),!legacy`. */
export function selectorString(selector: LabelSelector): string {
  return requirements(selector)
    .map((r) => {
      switch (r.operator) {
        case 'Equals':
          return `${r.key}=${r.values[0]}`;
        case 'In':
          return `${r.key} in (${r.values.join(',')})`;
        case 'NotIn':
          return `${r.key} notin (${r.values.join(',')})`;
        case 'Exists':
          return r.key;
        case 'DoesNotExist':
          return `!${r.key}`;
      }
    })
    .join(',');
}
