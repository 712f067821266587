import pino from 'pino';

/**
 * One JSON object per line on stderr (pino), in the same shape for every process of the stack:
 * `{"level":"info","time":"<ISO 8601>","component":"sidecar","message":"…", …fields}`.
 */
export type LogFields = Record<string, unknown>;

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
}

/**
 * Synchronous writes: a process that exits right after logging why (a failed start, a fatal error)
 * must not lose that line, and the components log little outside debug.
 */
let stderrDestination: pino.DestinationStream | undefined;

/** A component's logger, writing to stderr unless given another destination (a log file). */
export function createLogger(component: string, level: LogLevel = 'info', destination?: pino.DestinationStream): Logger {
  const logger = pino(
    {
      level,
      base: { component },
      messageKey: 'message',
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination ?? (stderrDestination ??= pino.destination({ dest: 2, sync: true })),
  );
  return {
    debug: (message, fields) => logger.debug(fields ?? {}, message),
    info: (message, fields) => logger.info(fields ?? {}, message),
    warn: (message, fields) => logger.warn(fields ?? {}, message),
    error: (message, fields) => logger.error(fields ?? {}, message),
  };
}

/**
 * Makes everything a long-running process says on stderr a log line of its own: Node's warnings and
 * an error nobody caught (logged, then the process exits 1), instead of text between the JSON lines.
 */
export function logProcessEvents(log: Logger): void {
  process.removeAllListeners('warning');
  process.on('warning', (warning) => log.warn(warning.message, { warning: warning.name }));
  const fatal = (error: unknown) => {
    log.error('fatal error', { error: error instanceof Error ? error.stack : String(error) });
    process.exit(1);
  };
  process.on('uncaughtException', fatal);
  process.on('unhandledRejection', fatal);
}
