// A VM's console log as `kubectl logs` shows it: the older segment
// (<file>.1, kept by the launcher's size cap) and then the file, rendered with
// the request's options, and for follow whatever is appended afterwards.
// Segments are capped by the launcher (10 MiB by default), so reading them
// whole for tailLines stays bounded.
import { open, type FileHandle } from 'node:fs/promises';
import { CriRecordReader, type CriRecord } from './cri.js';
import { followFile, type FollowOptions } from './follow.js';
import { LogRenderer, tailStart, type RenderOptions } from './render.js';

export interface ConsoleLogOptions extends RenderOptions {
  /** Show only the last this many lines (before following). */
  tailLines?: number;
}

/** The log as it is now. Throws ENOENT when there is no log file. */
export async function readConsoleLog(file: string, options: ConsoleLogOptions): Promise<Buffer> {
  const handle = await open(file, 'r');
  try {
    const snapshot = await readSnapshot(file, handle);
    // A record still being written shows as far as it got.
    return renderTail(snapshot.records.concat(snapshot.reader.end()), new LogRenderer(options), options);
  } finally {
    await handle.close();
  }
}

/**
 * The log as it is now, then what is appended, until the signal aborts or
 * limitBytes is reached. The file is opened before this resolves, so a
 * missing log (ENOENT) is an error here rather than in the stream.
 */
export async function followConsoleLog(file: string, options: ConsoleLogOptions, follow: FollowOptions): Promise<AsyncGenerator<Buffer>> {
  const handle = await open(file, 'r');
  try {
    return streamLog(file, handle, await readSnapshot(file, handle), options, follow);
  } catch (err) {
    await handle.close();
    throw err;
  }
}

async function* streamLog(
  file: string,
  handle: FileHandle,
  snapshot: Snapshot,
  options: ConsoleLogOptions,
  follow: FollowOptions,
): AsyncGenerator<Buffer> {
  const renderer = new LogRenderer(options);
  // followFile closes the handle once it runs; until then it is ours to close.
  let handedOver = false;
  try {
    const initial = renderTail(snapshot.records, renderer, options);
    if (initial.length > 0) yield initial;
    if (renderer.done) return;
    handedOver = true;
    for await (const chunk of followFile(file, handle, snapshot.position, follow)) {
      const out = renderer.render(snapshot.reader.push(chunk));
      if (out.length > 0) yield out;
      if (renderer.done) return;
    }
  } finally {
    if (!handedOver) await handle.close();
  }
}

function renderTail(records: CriRecord[], renderer: LogRenderer, options: ConsoleLogOptions): Buffer {
  return renderer.render(options.tailLines === undefined ? records : records.slice(tailStart(records, options.tailLines)));
}

interface Snapshot {
  /** Every complete record of both segments. */
  records: CriRecord[];
  /** Where the current file was read up to. */
  position: number;
  /** Holds the current file's unfinished last line, if any. */
  reader: CriRecordReader;
}

async function readSnapshot(file: string, handle: FileHandle): Promise<Snapshot> {
  // The launcher rotates between whole records, so the older segment ends with a complete one.
  const olderReader = new CriRecordReader();
  const olderRecords = olderReader.push(await readOlderSegment(file, handle)).concat(olderReader.end());
  const current = await handle.readFile();
  const reader = new CriRecordReader();
  return { records: olderRecords.concat(reader.push(current)), position: current.length, reader };
}

async function readOlderSegment(file: string, held: FileHandle): Promise<Buffer> {
  const older = await open(`${file}.1`, 'r').catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw err;
  });
  if (!older) return Buffer.alloc(0);
  try {
    const [olderStat, heldStat] = await Promise.all([older.stat(), held.stat()]);
    // Rotated since `held` was opened: the older segment is the held file, which is read as the current one.
    return olderStat.ino === heldStat.ino ? Buffer.alloc(0) : await older.readFile();
  } finally {
    await older.close();
  }
}
