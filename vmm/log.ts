// The slice of a pino logger that vmm/ uses, so callers pass a pino child and
// tests pass a recorder, without vmm/ depending on pino.
export interface Log {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}
