/** A failure the CLI reports as one line on stderr, with a non-zero exit status. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}
