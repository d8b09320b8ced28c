// What the cluster controllers share: a work queue of object keys that takes
// keys only once the controller is started (its informers' caches synced, so
// a sync never acts on an empty cache), seeded then with every object the
// controller owns; level-triggered from there on.
import { KeyQueue, type QueueOptions } from '../kube/key-queue.js';

export abstract class QueuedController {
  private readonly queue: KeyQueue;
  private started = false;

  protected constructor(opts: QueueOptions) {
    this.queue = new KeyQueue((key) => this.sync(key), opts);
  }

  /** Makes one object's world match its spec; the queue retries it with back-off when it throws. */
  protected abstract sync(key: string): Promise<void>;

  /** The keys of every object the controller owns, synced first when it starts. */
  protected abstract ownedKeys(): string[];

  /** Starts working; call once the caches are synced. */
  start(): void {
    this.started = true;
    for (const key of this.ownedKeys()) this.enqueue(key);
  }

  stop(): void {
    this.started = false;
    this.queue.stop();
  }

  /** Resolves when nothing is queued or running (tests). */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  protected enqueue(key: string): void {
    if (this.started) this.queue.add(key);
  }

  /** Syncs the key again after a delay (a decision that waits on a clock). */
  protected enqueueAfter(key: string, delayMs: number): void {
    if (this.started) this.queue.addAfter(key, delayMs);
  }
}
