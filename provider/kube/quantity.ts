// Kubernetes resource quantities ("500m", "1.5Gi", "1e3"). client-node keeps
// its parser internal and no maintained package covers the full suffix set,
// so this is the small grammar from k8s.io/apimachinery/pkg/api/resource.
const SUFFIX: Record<string, number> = {
  '': 1,
  n: 1e-9,
  u: 1e-6,
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};

/** The quantity's value as a number, or null when it is not a valid quantity. */
export function parseQuantity(raw: string): number | null {
  const m = /^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$/.exec(raw.trim());
  if (!m?.[1]) return null;
  const base = Number(m[1] + (m[2] ?? ''));
  const factor = SUFFIX[m[3] ?? ''];
  return factor === undefined || !Number.isFinite(base) ? null : base * factor;
}
