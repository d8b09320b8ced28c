// A bad flag or config value, named by its field: the CLI prints it without a
// stack. Its own module so the CLI can tell it apart without loading config.ts.
export class ConfigError extends Error {
  readonly kind = 'ConfigError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
    this.name = 'ConfigError';
  }
}
