// What is mounted below some directories, read from this process's mount
// namespace: a directory must not be removed recursively with a mount below
// it, or the removal goes into the mounted filesystem (a volume's data).
import { readFile } from 'node:fs/promises';

/** Mount points below `dirs`, deepest first (mountinfo escapes a space as \\040). */
export async function mountsBelow(dirs: string[]): Promise<string[]> {
  const points = (await readFile('/proc/self/mountinfo', 'utf8'))
    .split('\n')
    .map((l) => l.split(' ')[4]?.replace(/\\040/g, ' '))
    .filter((p): p is string => !!p && dirs.some((d) => p.startsWith(`${d}/`)));
  return [...new Set(points)].sort((a, b) => b.length - a.length);
}
