// The images a node reports in node.status.images, as the kubelet does, so
// the scheduler's ImageLocality plugin favours nodes that already hold a
// pod's image: each image once, named by every reference the store has for
// it (tags and repository@digest), largest first, at most 50 (the kubelet's
// nodeStatusMaxImages).
import type { ImageRecord, ImageStore } from './store.js';

export interface NodeImage {
  names: string[];
  sizeBytes: number;
}

export const MAX_NODE_IMAGES = 50;

export function nodeImagesOf(records: readonly ImageRecord[], max = MAX_NODE_IMAGES): NodeImage[] {
  const byImage = new Map<string, NodeImage>();
  for (const r of records) {
    const key = `${r.repository}@${r.digest}`;
    const image = byImage.get(key) ?? { names: [], sizeBytes: r.sizeBytes };
    image.names.push(r.reference);
    byImage.set(key, image);
  }
  const images = [...byImage.values()].map((i) => ({ ...i, names: i.names.sort() }));
  return images.sort((a, b) => b.sizeBytes - a.sizeBytes || a.names[0]!.localeCompare(b.names[0]!)).slice(0, max);
}

/** What the store at hand holds, as node.status.images. */
export async function readNodeImages(store: ImageStore): Promise<NodeImage[]> {
  return nodeImagesOf(await store.records());
}
