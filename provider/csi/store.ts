// The driver's records, kept in one JSON file under its directory and
// rewritten whole and durably on every change (write, fsync, rename, fsync
// the directory), so a restart, after a host crash too, finds every volume, snapshot, attachment, staging and publication it made. The
// files live beside it: volumes/<id>.img and snapshots/<id>.img.
import { mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { writeAtomic } from '../atomic-file.js';
import type { SnapshotRecord, VolumeRecord } from './records.js';

const STATE_VERSION = 1;

interface StateFile {
  version: number;
  volumes: VolumeRecord[];
  snapshots: SnapshotRecord[];
}

export class Store {
  readonly volumes = new Map<string, VolumeRecord>();
  readonly snapshots = new Map<string, SnapshotRecord>();
  private writing: Promise<void> = Promise.resolve();

  private constructor(readonly dir: string) {}

  /** Opens (creating) the directory, 0700: volume files hold tenants' data. */
  static async open(dir: string): Promise<Store> {
    const store = new Store(dir);
    for (const d of [dir, store.volumesDir, store.snapshotsDir]) await mkdir(d, { recursive: true, mode: 0o700 });
    let text: string | undefined;
    try {
      text = await readFile(store.stateFile, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    if (text !== undefined) {
      const state = JSON.parse(text) as StateFile;
      if (state.version !== STATE_VERSION)
        throw new Error(`${store.stateFile}: state version ${state.version}, this driver reads ${STATE_VERSION}`);
      for (const v of state.volumes) store.volumes.set(v.id, v);
      for (const s of state.snapshots) store.snapshots.set(s.id, s);
    }
    return store;
  }

  get stateFile(): string {
    return path.join(this.dir, 'state.json');
  }
  get volumesDir(): string {
    return path.join(this.dir, 'volumes');
  }
  get snapshotsDir(): string {
    return path.join(this.dir, 'snapshots');
  }
  volumeFile(id: string): string {
    return path.join(this.volumesDir, `${id}.img`);
  }
  snapshotFile(id: string): string {
    return path.join(this.snapshotsDir, `${id}.img`);
  }

  volumeByName(name: string): VolumeRecord | undefined {
    for (const v of this.volumes.values()) if (v.name === name) return v;
    return undefined;
  }
  snapshotByName(name: string): SnapshotRecord | undefined {
    for (const s of this.snapshots.values()) if (s.name === name) return s;
    return undefined;
  }

  async putVolume(v: VolumeRecord): Promise<void> {
    this.volumes.set(v.id, v);
    await this.save();
  }
  async deleteVolume(id: string): Promise<void> {
    this.volumes.delete(id);
    await this.save();
  }
  async putSnapshot(s: SnapshotRecord): Promise<void> {
    this.snapshots.set(s.id, s);
    await this.save();
  }
  async deleteSnapshot(id: string): Promise<void> {
    this.snapshots.delete(id);
    await this.save();
  }

  /** Writes one after another; each write takes the records as they are when it runs, so every caller's change is in a write it awaits. */
  private save(): Promise<void> {
    const next = this.writing.then(() => {
      const state: StateFile = { version: STATE_VERSION, volumes: [...this.volumes.values()], snapshots: [...this.snapshots.values()] };
      return writeAtomic(this.stateFile, JSON.stringify(state, null, 1), 0o600, { durable: true });
    });
    this.writing = next.catch(() => undefined);
    return next;
  }
}
